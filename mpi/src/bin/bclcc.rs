//! `bclcc`: compiles and links C programs against BCL's `mpi.h` and
//! `libbclmpi`, like `mpicc`.

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

const HELP: &str = "\
bclcc: compile and link MPI C programs against BCL (libbclmpi).

Usage: bclcc [OPTIONS] [COMPILER ARGUMENTS...]

Runs the C compiler with BCL's mpi.h on the include path and, when it
links, libbclmpi (soname libmpi.so.12) with an rpath to it, so the program
runs without LD_LIBRARY_PATH. Start the program with bcl-run, mpiexec
(hydra) or srun --mpi=pmi2.

Options (the first argument only):
  -show, --show   print the compiler command instead of running it
  --libdir        print the library directory: libmpi.so.12 and
                  libmpich.so.12 there are libbclmpi, so a program built
                  with MPICH's own mpicc runs on BCL, unmodified, when this
                  directory comes first on LD_LIBRARY_PATH
  --incdir        print the directory of mpi.h
  -h, --help      this text

Environment:
  BCLCC_CC (or CC)   the C compiler (default: cc)

Example:
  bclcc -O2 -o ring ring.c && bcl-run -n 4 ./ring";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("-h" | "--help") => {
            println!("{HELP}");
            return;
        }
        None => {
            eprintln!("bclcc: no input files (bclcc --help explains)");
            exit(2);
        }
        _ => {}
    }
    let libdir = match library_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bclcc: {e}");
            exit(1);
        }
    };
    let incdir = include_dir();
    match args[0].as_str() {
        "--libdir" => {
            println!("{}", libdir.display());
            return;
        }
        "--incdir" => {
            println!("{}", incdir.display());
            return;
        }
        _ => {}
    }
    let show = matches!(args[0].as_str(), "-show" | "--show");
    let user: Vec<String> = if show { args[1..].to_vec() } else { args };
    let cc = std::env::var("BCLCC_CC")
        .or_else(|_| std::env::var("CC"))
        .unwrap_or_else(|_| "cc".into());
    // Only compiling (-c, -E, -S, -M): no link flags.
    let links = !user
        .iter()
        .any(|a| matches!(a.as_str(), "-c" | "-E" | "-S" | "-M" | "-MM"));
    let mut cmd = vec![cc, format!("-I{}", incdir.display())];
    cmd.extend(user);
    if links {
        cmd.push(format!("-L{}", libdir.display()));
        cmd.push(format!("-Wl,-rpath,{}", libdir.display()));
        cmd.push("-lmpi".into());
    }
    if show {
        println!("{}", cmd.join(" "));
        return;
    }
    match Command::new(&cmd[0]).args(&cmd[1..]).status() {
        Ok(s) => exit(s.code().unwrap_or(1)),
        Err(e) => {
            eprintln!("bclcc: cannot run the C compiler {:?}: {e}", cmd[0]);
            exit(1);
        }
    }
}

/// Where `mpi.h` is: `$BCL_MPI_INCLUDE`, else the crate's `include/`.
fn include_dir() -> PathBuf {
    std::env::var_os("BCL_MPI_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
}

/// The library directory beside this executable (`bclmpi/lib`), made on
/// first use: links named as MPI programs expect (`libmpi.so`,
/// `libmpi.so.12`, `libmpich.so`, `libmpich.so.12`) to the library cargo
/// built.
fn library_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("where am I: {e}"))?;
    let here = exe
        .parent()
        .ok_or("the executable has no directory")?
        .to_path_buf();
    // `cargo build` puts the library beside bclcc; `cargo test` leaves it
    // in deps/ (it uplifts only what a build asks for), so the copy beside
    // bclcc may be an older build's: take the newer of the two.
    let modified = |p: &str| {
        std::fs::metadata(here.join(p))
            .and_then(|m| m.modified())
            .ok()
    };
    let target = ["libbclmpi.so", "deps/libbclmpi.so"]
        .into_iter()
        .filter_map(|p| Some((modified(p)?, p)))
        .max()
        .map(|(_, p)| p)
        .ok_or_else(|| {
            format!(
                "{} is missing: build it with `cargo build -p bcl-mpi` (same profile as bclcc)",
                here.join("libbclmpi.so").display()
            )
        })?;
    let target = Path::new("../..").join(target);
    let dir = here.join("bclmpi").join("lib");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for name in ["libmpi.so", "libmpi.so.12", "libmpich.so", "libmpich.so.12"] {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
            // Made under a name of this process's, then renamed over the
            // link: several bclcc runs at once (a parallel make, parallel
            // tests) each replace it atomically instead of racing between
            // a removal and a creation.
            let fresh = dir.join(format!(".{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&fresh);
            std::os::unix::fs::symlink(&target, &fresh)
                .and_then(|()| std::fs::rename(&fresh, &link))
                .map_err(|e| format!("linking {}: {e}", link.display()))?;
        }
    }
    Ok(dir)
}
