//! `bcl-afxdp-info IFNAME [--generic|--native] [--frame-size N] [--hold SECS]`: says whether
//! the `afxdp` method can run on an interface and, if so, opens it and
//! prints its descriptor and mode report (which XDP mode, which bind mode
//! per queue, and why). With `--hold`, keeps the endpoint open that long
//! (tests use this to kill a process that owns an attached program).

use std::io::Write;
use std::time::Duration;

use bcl_afxdp::{probe, AfXdpConfig, AfXdpMethod, AttachMode};
use bcl_core::method::{Availability, Method};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut ifname = None;
    let mut hold = None;
    let mut force = None;
    let mut frame_size = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--generic" => force = Some(AttachMode::Generic),
            "--native" => force = Some(AttachMode::Native),
            "--frame-size" => frame_size = it.next().and_then(|s| s.parse::<u32>().ok()),
            "--hold" => {
                hold = it
                    .next()
                    .and_then(|s| s.parse::<f64>().ok())
                    .map(Duration::from_secs_f64)
            }
            "-h" | "--help" => {
                println!("usage: bcl-afxdp-info IFNAME [--generic|--native] [--frame-size N] [--hold SECS]");
                return;
            }
            s if ifname.is_none() && !s.starts_with('-') => ifname = Some(s.to_string()),
            s => {
                eprintln!("bcl-afxdp-info: unexpected argument {s:?} (see --help)");
                std::process::exit(2);
            }
        }
    }
    let Some(ifname) = ifname else {
        eprintln!(
            "usage: bcl-afxdp-info IFNAME [--generic|--native] [--frame-size N] [--hold SECS]"
        );
        std::process::exit(2);
    };
    if let Availability::NotUsable(why) = probe(&ifname) {
        println!("afxdp on {ifname}: not usable: {why}");
        std::process::exit(1);
    }
    let mut cfg = AfXdpConfig::new(&ifname);
    cfg.force_attach = force;
    if let Some(f) = frame_size {
        cfg.frame_size = f;
    }
    match AfXdpMethod::open(cfg) {
        Ok(m) => {
            println!("descriptor {}", m.descriptor());
            print!("{}", m.mode_report());
            println!("mtu {}", m.caps().mtu);
            if let Some(d) = hold {
                println!("ready");
                let _ = std::io::stdout().flush();
                std::thread::sleep(d);
            }
        }
        Err(e) => {
            println!("afxdp on {ifname}: open failed: {e}");
            std::process::exit(1);
        }
    }
}
