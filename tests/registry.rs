//! Choosing a method per peer, and the registry that says which methods
//! exist. A kind registered here — a second simulated fabric under the name
//! `simnet` — is refused by name before it is registered, and afterwards
//! accepted by pins and resource databases, opened through the registry,
//! chosen by the selection policy for a peer, and listed with its probe
//! (the rows `bcl-info` prints). Nothing outside this file knows the name.
//! The endpoint records why each link uses its method (or why none).

use bcl::cluster::descriptor::DescriptorTable;
use bcl::cluster::resources::ClusterConfig;
use bcl::cluster::select::{Pin, Policy};
use bcl::cluster::LocalPolicy;
use bcl::core::method::{OpenSpec, Scope};
use bcl::registry::Registry;
use bcl::sim::{FabricConfig, SimFabric, SimKind};
use bcl::{Endpoint, JobKey, ProcessAddr};
use std::path::Path;

const JOB: JobKey = JobKey(0x5e9);

/// An endpoint of process `addr` whose one method the registry opens.
fn open_endpoint(registry: &Registry, net: &SimFabric, addr: ProcessAddr) -> Endpoint {
    let kind = registry.lookup("simnet").expect("registered");
    let method = kind
        .open(&OpenSpec::new(JOB, addr))
        .expect("the kind opens an endpoint of its fabric");
    Endpoint::builder(addr, JOB)
        .method(method)
        .clock(net.clock())
        .build()
        .unwrap()
}

/// An endpoint of process `node.0` of job `JOB` on `fabric`.
fn sim_endpoint(fabric: &SimFabric, node: u32) -> Endpoint {
    Endpoint::builder(ProcessAddr::new(node, 0), JOB)
        .method(Box::new(fabric.endpoint()))
        .clock(fabric.clock())
        .build()
        .unwrap()
}

/// The descriptor table of `ep` on node `node`, every method on fabric S.
fn table(ep: &Endpoint, node: &str) -> DescriptorTable {
    let mut t = DescriptorTable::new(node, node);
    for d in ep.descriptors() {
        t.push(&d, Some("S"));
    }
    t
}

/// Gives `a` (on node n1) and `b` (on node n2) `policy` and each other's
/// descriptor tables.
fn introduce(a: &mut Endpoint, b: &mut Endpoint, policy: Policy) {
    let (ta, tb) = (table(a, "n1"), table(b, "n2"));
    a.set_policy(LocalPolicy {
        table: ta.clone(),
        policy: policy.clone(),
    });
    b.set_policy(LocalPolicy {
        table: tb.clone(),
        policy,
    });
    a.add_peer_table(b.local(), tb);
    b.add_peer_table(a.local(), ta);
}

/// Sends `msg` from `a` to `b`, driving both until it is delivered, and
/// checks it arrived intact.
fn deliver(a: &mut Endpoint, b: &mut Endpoint, msg: &[u8]) {
    a.send(b.local(), msg).unwrap();
    let got = loop {
        a.progress().unwrap();
        b.progress().unwrap();
        if let Some(d) = b.poll_delivery() {
            break d;
        }
    };
    assert_eq!(b.message(&got).unwrap(), msg);
    b.release(got).unwrap();
}

#[test]
fn an_extra_kind_is_pinned_configured_opened_selected_and_listed() {
    let net = SimFabric::new(FabricConfig {
        method_name: "simnet",
        ..FabricConfig::default()
    });
    let builtin = Registry::builtin();
    let e = Pin::parse("simnet", "BCL_METHODS=simnet", builtin).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("BCL_METHODS=simnet: unknown method \"simnet\" (known: shm, bcld, vfio, afxdp, packet, udp, sim)"),
        "{e}"
    );

    let registry = builtin.with(SimKind::on(net.clone()));
    assert_eq!(registry.names().last(), Some(&"simnet"));
    assert_eq!(registry.scope("simnet"), Some(Scope::Fabric));

    // Pinned, and named by a resource database.
    let pin = Pin::parse("simnet,udp", "BCL_METHODS=simnet,udp", &registry).unwrap();
    let policy = Policy::new(&registry, &[], Some(pin));
    let cfg = "preference = [\"simnet\", \"udp\"]\n";
    let file = Path::new("extra.toml");
    let parsed = ClusterConfig::parse_with(file, cfg, &registry).unwrap();
    assert_eq!(parsed.preference, ["simnet", "udp"]);
    let e = ClusterConfig::parse(file, cfg).unwrap_err().to_string();
    assert!(e.contains("unknown method \"simnet\""), "{e}");

    // Opened through the registry and chosen for a peer on the same fabric.
    let (a_addr, b_addr) = (ProcessAddr::new(1, 0), ProcessAddr::new(2, 0));
    let mut a = open_endpoint(&registry, &net, a_addr);
    let mut b = open_endpoint(&registry, &net, b_addr);
    assert_eq!(table(&a, "n1").entries[0].method, "simnet");
    introduce(&mut a, &mut b, policy);
    deliver(&mut a, &mut b, b"over the registered kind");
    let link = a.link(b_addr).unwrap();
    assert_eq!(link.method.as_deref(), Some("simnet"));
    assert!(
        link.reason
            .starts_with("simnet: same fabric S [pinned by BCL_METHODS=simnet,udp]"),
        "{}",
        link.reason
    );

    // Listed with its probe, as bcl-info shows every kind of the registry.
    let rows = registry.probe(&[]);
    let row = rows.iter().find(|r| r.method == "simnet").unwrap();
    assert!(row.usable, "{row:?}");
    assert_eq!(row.scope, Scope::Fabric);
    assert_eq!(
        rows.iter().map(|r| r.method).collect::<Vec<_>>(),
        registry.names()
    );
}

#[test]
fn the_builtin_registry_lists_every_method_once_in_preference_order() {
    let r = Registry::builtin();
    assert_eq!(
        r.names(),
        ["shm", "bcld", "vfio", "afxdp", "packet", "udp", "sim"]
    );
    assert_eq!(
        r.default_preference(),
        ["shm", "bcld", "vfio", "afxdp", "packet", "udp"]
    );
    assert_eq!(
        r.network_methods(),
        ["bcld", "vfio", "afxdp", "packet", "udp"]
    );
    // The Ethernet methods (and the node daemon's, which are Ethernet
    // frames) reach each other's descriptors; others do not.
    assert!(r.reaches("packet", "vfio") && r.reaches("afxdp", "packet"));
    assert!(r.reaches("bcld", "packet") && r.reaches("afxdp", "bcld"));
    assert!(!r.reaches("udp", "packet") && !r.reaches("shm", "sim"));
    let e = r.lookup("tcp").err().unwrap().to_string();
    assert_eq!(
        e,
        "unknown method \"tcp\" (known: shm, bcld, vfio, afxdp, packet, udp, sim)"
    );
    // Every kind's name is what its open methods report, and its address
    // grammar accepts what they publish: checked for the kinds that open
    // without privileges or hardware here.
    for (name, spec) in [
        ("shm", OpenSpec::new(JOB, ProcessAddr::new(9, 1))),
        (
            "udp",
            OpenSpec {
                bind: Some("127.0.0.1:0".parse().unwrap()),
                ..OpenSpec::new(JOB, ProcessAddr::new(9, 2))
            },
        ),
    ] {
        let kind = r.lookup(name).unwrap();
        let m = kind.open(&spec).unwrap();
        assert_eq!(m.name(), name);
        let d = m.descriptor();
        assert_eq!(d.method, name);
        kind.check_address(&d.address).unwrap();
        assert!(kind.check_address("not an address").is_err());
    }
}

#[test]
fn the_endpoint_records_the_chosen_method_and_why() {
    let fabric = SimFabric::new(FabricConfig::default());
    let mut a = sim_endpoint(&fabric, 1);
    let mut b = sim_endpoint(&fabric, 2);
    let policy = Policy::new(
        Registry::builtin(),
        &["shm".into(), "sim".into(), "udp".into()],
        None,
    );
    introduce(&mut a, &mut b, policy);
    assert!(a.link(b.local()).is_none());
    deliver(&mut a, &mut b, b"hi");
    let r = a.link(b.local()).unwrap();
    assert_eq!(r.method.as_deref(), Some("sim"));
    assert!(
        r.reason
            .starts_with("sim: same fabric S; passed over: shm: not open here"),
        "{}",
        r.reason
    );
    // b never sent: its link came from a's first frame.
    let r = b.link(a.local()).unwrap();
    assert_eq!(r.method.as_deref(), Some("sim"));
    assert!(r.reason.contains("the peer chose"), "{}", r.reason);
}

#[test]
fn a_pin_nothing_honours_fails_the_sends_and_says_why() {
    let fabric = SimFabric::new(FabricConfig::default());
    let mut a = sim_endpoint(&fabric, 1);
    let b = sim_endpoint(&fabric, 2);
    let pin = Pin::parse("udp", "BCL_METHODS=udp", Registry::builtin()).unwrap();
    a.set_policy(LocalPolicy {
        table: table(&a, "n1"),
        policy: Policy::new(Registry::builtin(), &[], Some(pin)),
    });
    a.add_peer_table(b.local(), table(&b, "n2"));
    let h = a.send(b.local(), b"x").unwrap();
    let err = a
        .wait_send(h, std::time::Duration::from_secs(5))
        .unwrap_err();
    assert!(err.to_string().contains("route"), "{err}");
    let r = a.link(b.local()).unwrap();
    assert_eq!(r.method, None);
    assert!(
        r.reason.contains("restricted by BCL_METHODS=udp"),
        "{}",
        r.reason
    );
    assert!(r.reason.contains("udp: not open here"), "{}", r.reason);
}

#[test]
fn without_a_policy_the_first_method_that_opens_wins() {
    let fabric = SimFabric::new(FabricConfig::default());
    let mut a = sim_endpoint(&fabric, 1);
    let b = sim_endpoint(&fabric, 2);
    a.add_peer(b.local(), b.descriptors()[0].clone());
    a.send(b.local(), b"x").unwrap();
    a.progress().unwrap();
    let r = a.link(b.local()).unwrap();
    assert_eq!(r.method.as_deref(), Some("sim"));
    assert!(r.reason.contains("first method"), "{}", r.reason);
}
