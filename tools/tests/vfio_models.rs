//! The tools' `vfio` transport end to end without hardware: the two ends
//! of `bcl-pingpong` (`methods::serve_on` and `connect_on`, the code
//! `--method vfio` runs after opening the NIC) over two virtio-net device
//! models on the in-memory PCI host, joined by a virtual wire, each end in
//! its own thread as in two processes. The real NICs (QEMU virtio-net
//! behind VFIO) are exercised by `tests/vm/run.sh`.

use bcl::Registry;
use bcl_tools::end::{EndSpec, MethodArg};
use bcl_tools::methods::{connect_on, peer_descriptor, serve_on};
use bcl_tools::pingpong::{run_client, serve_echo, PingOptions, TransportClient};
use bcl_vfio::method::{NicMethod, VfioMethodConfig};
use bcl_vfio::testing::{InMemoryPci, Wire, WirePort};
use bcl_vfio::virtio::model::{VirtioNetModel, VirtioNetModelConfig};
use bcl_vfio::virtio::net::{VirtioNet, VirtioNetConfig};
use std::time::Duration;

const MAC_S: [u8; 6] = [0x52, 0x54, 0x00, 0xbc, 0x20, 0x01];
const MAC_C: [u8; 6] = [0x52, 0x54, 0x00, 0xbc, 0x20, 0x02];

fn nic(addr: &str, mac: [u8; 6], port: WirePort, busy: bool) -> Box<dyn bcl::Method> {
    let host = InMemoryPci::new(
        addr.parse().unwrap(),
        VirtioNetModel::new(
            VirtioNetModelConfig {
                mac,
                ..Default::default()
            },
            port.clone(),
        ),
    );
    host.attach_wire(&port);
    let cfg = VfioMethodConfig {
        interrupts: !busy,
        ..VfioMethodConfig::default()
    };
    let net = VirtioNet::new(
        host,
        VirtioNetConfig {
            queue_size: cfg.queue_size,
            interrupts: cfg.interrupts,
        },
    )
    .expect("virtio-net bring-up on the model");
    Box::new(NicMethod::new(net, cfg))
}

fn spec(busy: bool) -> EndSpec {
    EndSpec {
        busy_poll: busy,
        ..EndSpec::new(MethodArg::bcl("vfio").unwrap())
    }
}

/// Runs a pingpong of all `sizes` between a server on one modelled NIC and
/// a client on the other that reaches it through `peer(server descriptor)`.
fn pingpong(busy: bool, peer: impl Fn(&str) -> String) {
    let (ps, pc) = Wire::new(1024);
    let server_method = nic("0000:00:02.0", MAC_S, ps, busy);
    let client_method = nic("0000:00:03.0", MAC_C, pc, busy);
    let (descriptor, mut server) = serve_on(server_method, &spec(busy)).unwrap();
    assert_eq!(descriptor, "vfio:52:54:00:bc:20:01@0000:00:02.0");
    let wait = Duration::from_secs(30);
    let echo = std::thread::spawn(move || serve_echo(&mut *server, wait, wait).unwrap());
    let registry = Registry::builtin();
    let vfio = registry.lookup("vfio").unwrap();
    let peer = peer_descriptor(registry, vfio, &peer(&descriptor)).unwrap();
    let mut client = connect_on(client_method, &spec(busy), peer).unwrap();
    let opts = PingOptions {
        sizes: vec![1, 8, 1400, 1500, 16 * 1024, 60 * 1024],
        iters: 50,
        warmup: 5,
        timeout: wait,
    };
    let out = run_client(&mut TransportClient::new(&mut *client), &opts).unwrap();
    drop(client);
    let echoed = echo.join().unwrap();
    let c = out.counters;
    assert_eq!((c.lost, c.duplicates, c.corrupt), (0, 0, 0));
    assert_eq!(c.sent, c.received);
    assert_eq!(
        c.received,
        6 * 55 + 1,
        "every round trip, plus first contact"
    );
    assert_eq!(echoed, c.received);
    assert_eq!(out.results.len(), 6);
}

#[test]
fn pingpong_over_modelled_nics_blocking_on_msix() {
    pingpong(false, |d| d.to_string());
}

#[test]
fn pingpong_over_modelled_nics_busy_polling() {
    pingpong(true, |d| d.to_string());
}

#[test]
fn a_vfio_client_reaches_a_server_by_a_packet_descriptor() {
    // What a vfio end does with the descriptor a packet (AF_PACKET) server
    // prints: the frames are the same, only the MAC matters.
    pingpong(false, |d| {
        let mac = d.trim_start_matches("vfio:").split('@').next().unwrap();
        format!("packet:{mac}/7")
    });
}
