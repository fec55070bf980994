//! LogGP parameters and where they come from: defaults measured on the
//! development machine, a `bcl-loggp --json` report, or a TOML section.

use std::path::Path;

/// Why a cost model could not be loaded or used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CostError {
    /// A TOML file or section with a bad field.
    #[error("{file}: {field}: {message}")]
    Config {
        /// The file (or a description of where the text came from).
        file: String,
        /// The field, dotted from the top (`coll.loggp.intra.g_us`), or `-`
        /// for syntax errors.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A `bcl-loggp` JSON report with a bad field.
    #[error("{source_name}: {field}: {message}")]
    Json {
        /// Which report (`intra`, `inter`, or a file name).
        source_name: String,
        /// The field (`model.g_ns`, `results[0].L_ns`, or `-` for syntax).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A bad `BCL_COLL_ALG` entry.
    #[error("algorithm override {entry:?}: {message}")]
    Override {
        /// The entry (`allreduce:rnig`).
        entry: String,
        /// What is wrong, with the valid names.
        message: String,
    },
    /// A parameter value outside its domain.
    #[error("LogGP parameter {field} = {value}: {message}")]
    Parameter {
        /// The parameter (`o_s`, `big_g`, ...).
        field: &'static str,
        /// Its value.
        value: f64,
        /// What is wrong.
        message: &'static str,
    },
}

/// The LogGP parameters of one path (Culler et al.; BCL-3 thesis §5.2), in
/// seconds (`big_g` in seconds per byte).
///
/// One message of m bytes costs its sender `o_s` of CPU, arrives
/// `L + (m − 1)·G` after the sender's overhead ends, and costs its receiver
/// `o_r`: end to end `o_s + L + (m − 1)·G + o_r`. Two messages leave (and
/// enter) one processor at least `max(g, m·G)` apart. `l` may be below
/// zero inside a node (sending and receiving overlap; BCL-3's intra-node L
/// was −0.14 µs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogGp {
    /// Latency L, s.
    pub l: f64,
    /// Send overhead o_s, s (CPU time of the sender).
    pub o_s: f64,
    /// Receive overhead o_r, s (CPU time of the receiver).
    pub o_r: f64,
    /// Gap g between two small messages, s.
    pub g: f64,
    /// Gap per byte G of long messages, s per byte (1 / bandwidth).
    pub big_g: f64,
}

impl LogGp {
    /// Parameters from microseconds (L, o_s, o_r, g) and nanoseconds per
    /// byte (G), the units of `bcl-loggp`'s table; checked as by
    /// [`LogGp::check`].
    pub fn from_us(
        l_us: f64,
        o_s_us: f64,
        o_r_us: f64,
        g_us: f64,
        big_g_ns_per_byte: f64,
    ) -> Result<LogGp, CostError> {
        let p = LogGp {
            l: l_us * 1e-6,
            o_s: o_s_us * 1e-6,
            o_r: o_r_us * 1e-6,
            g: g_us * 1e-6,
            big_g: big_g_ns_per_byte * 1e-9,
        };
        p.check()?;
        Ok(p)
    }

    /// Checks that every parameter is finite, that the overheads and gaps
    /// are not negative and that a message cannot arrive before it is sent
    /// (`o_s + L ≥ 0`).
    pub fn check(&self) -> Result<(), CostError> {
        let fields = [
            ("l", self.l),
            ("o_s", self.o_s),
            ("o_r", self.o_r),
            ("g", self.g),
            ("big_g", self.big_g),
        ];
        for (field, value) in fields {
            if !value.is_finite() {
                return Err(CostError::Parameter {
                    field,
                    value,
                    message: "not a finite number",
                });
            }
            if field != "l" && value < 0.0 {
                return Err(CostError::Parameter {
                    field,
                    value,
                    message: "must not be negative",
                });
            }
        }
        if self.o_s + self.l < 0.0 {
            return Err(CostError::Parameter {
                field: "l",
                value: self.l,
                message: "o_s + L is below zero (a message would arrive before it is sent)",
            });
        }
        Ok(())
    }

    /// End-to-end time of one message of `m` bytes: `o_s + L + (m − 1)·G +
    /// o_r`.
    pub fn p2p(&self, m: f64) -> f64 {
        self.o_s + self.l + self.wire(m) + self.o_r
    }

    /// Time between the first and the last byte of an `m`-byte message:
    /// `(m − 1)·G` (0 for empty messages).
    pub fn wire(&self, m: f64) -> f64 {
        (m - 1.0).max(0.0) * self.big_g
    }

    /// Least time between two messages of `m` bytes leaving (or entering)
    /// one processor: `max(g, m·G)`.
    pub fn gap(&self, m: f64) -> f64 {
        self.g.max(m * self.big_g)
    }

    /// Time between the starts of two back-to-back sends of `m` bytes by
    /// one processor: its CPU (`o_s`) or its NIC (`max(g, m·G)`), whichever
    /// is slower.
    pub fn send_interval(&self, m: f64) -> f64 {
        self.o_s.max(self.gap(m))
    }

    /// The parameters of a `bcl-loggp --json` report (shared/contracts/
    /// tools.md): its `model` when present (L, o_s, o_r, g of the smallest
    /// size, G of the largest), else the same taken from `results`.
    /// `source_name` names the report in errors.
    pub fn from_loggp_json(source_name: &str, text: &str) -> Result<LogGp, CostError> {
        let err = |field: &str, message: String| CostError::Json {
            source_name: source_name.to_string(),
            field: field.to_string(),
            message,
        };
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| err("-", e.to_string()))?;
        let num = |obj: &serde_json::Value, prefix: &str, key: &str| -> Result<f64, CostError> {
            let field = format!("{prefix}{key}");
            match obj.get(key) {
                None => Err(err(&field, "missing".into())),
                Some(x) => x
                    .as_f64()
                    .ok_or_else(|| err(&field, format!("expected a number, found {x}"))),
            }
        };
        let (small, large, small_name, large_name) = match v.get("model") {
            Some(m) if !m.is_null() => (m, m, "model.".to_string(), "model.".to_string()),
            _ => {
                let results = v
                    .get("results")
                    .and_then(|r| r.as_array())
                    .ok_or_else(|| err("results", "missing (and no model either)".into()))?;
                if results.is_empty() {
                    return Err(err("results", "empty".into()));
                }
                let size = |i: usize| -> Result<u64, CostError> {
                    results[i]
                        .get("size")
                        .and_then(|s| s.as_u64())
                        .ok_or_else(|| {
                            err(
                                &format!("results[{i}].size"),
                                "missing or not a byte count".into(),
                            )
                        })
                };
                let (mut lo, mut hi) = (0, 0);
                for i in 0..results.len() {
                    if size(i)? < size(lo)? {
                        lo = i;
                    }
                    if size(i)? > size(hi)? {
                        hi = i;
                    }
                }
                (
                    &results[lo],
                    &results[hi],
                    format!("results[{lo}]."),
                    format!("results[{hi}]."),
                )
            }
        };
        let l = num(small, &small_name, "L_ns")?;
        let o_s = num(small, &small_name, "o_s_ns")?;
        let o_r = num(small, &small_name, "o_r_ns")?;
        let g = num(small, &small_name, "g_ns")?;
        let big_g = num(large, &large_name, "G_ns_per_byte")?;
        LogGp::from_us(l / 1e3, o_s / 1e3, o_r / 1e3, g / 1e3, big_g)
            .map_err(|e| err(&small_name, e.to_string()))
    }

    /// Shared memory on the development machine (docs/PERFORMANCE.md,
    /// "LogGP parameters", shm beside udp: L, o_s, o_r, g at 8 B, G at
    /// 64 KiB): L = −0.09 µs, o_s = 0.126 µs, o_r = 0.215 µs,
    /// g = 0.431 µs, G = 1.20 ns/B.
    pub const SHM: LogGp = LogGp {
        l: -0.09e-6,
        o_s: 0.126e-6,
        o_r: 0.215e-6,
        g: 0.431e-6,
        big_g: 1.20e-9,
    };

    /// The AF_XDP method between two network namespaces on the
    /// development machine (docs/PERFORMANCE.md, "LogGP parameters",
    /// afxdp over veth: L, o_s, o_r, g at 8 B, G at 64 KiB): L = 0.11 µs,
    /// o_s = 2.549 µs, o_r = 0.920 µs, g = 1.264 µs, G = 3.51 ns/B.
    pub const AFXDP: LogGp = LogGp {
        l: 0.11e-6,
        o_s: 2.549e-6,
        o_r: 0.920e-6,
        g: 1.264e-6,
        big_g: 3.51e-9,
    };

    /// The packet method over veth, measured as [`LogGp::AFXDP`]:
    /// L = −0.41 µs, o_s = 2.094 µs, o_r = 0.769 µs, g = 1.177 µs,
    /// G = 3.20 ns/B.
    pub const PACKET: LogGp = LogGp {
        l: -0.41e-6,
        o_s: 2.094e-6,
        o_r: 0.769e-6,
        g: 1.177e-6,
        big_g: 3.20e-9,
    };

    /// The udp method on loopback, measured as [`LogGp::AFXDP`]:
    /// L = −0.54 µs, o_s = 2.155 µs, o_r = 1.583 µs, g = 1.180 µs,
    /// G = 6.46 ns/B.
    pub const UDP: LogGp = LogGp {
        l: -0.54e-6,
        o_s: 2.155e-6,
        o_r: 1.583e-6,
        g: 1.180e-6,
        big_g: 6.46e-9,
    };

    /// BCL-3's intra-node parameters (thesis Table 5.3), for comparison.
    pub const BCL3_INTRA: LogGp = LogGp {
        l: -0.14e-6,
        o_s: 1.85e-6,
        o_r: 1.0172e-6,
        g: 3.120e-6,
        big_g: 2.55e-9,
    };

    /// BCL-3's inter-node parameters (thesis Table 5.3, Myrinet), for
    /// comparison.
    pub const BCL3_INTER: LogGp = LogGp {
        l: 10.27e-6,
        o_s: 7.05e-6,
        o_r: 1.0172e-6,
        g: 11.0911e-6,
        big_g: 6.83e-9,
    };
}

/// Which parameters a message between two ranks uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Link {
    /// Both ranks on one node: shared memory.
    Intra,
    /// Ranks on different nodes: the network.
    Inter,
}

/// The cost of a collective's messages and local work: LogGP parameters
/// inside a node and between nodes, and the per-byte time of local copies
/// and reductions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Between ranks of one node (shared memory).
    pub intra: LogGp,
    /// Between ranks of different nodes (the network).
    pub inter: LogGp,
    /// A local copy (a `Copy` step), s per byte.
    pub copy_per_byte: f64,
    /// A local reduction (a `Reduce` step, or a combining receive), s per
    /// byte.
    pub reduce_per_byte: f64,
}

/// Per-byte time of a memory copy on the development machine: 0.1 ns/B
/// (`copy_from_slice` of 4 MiB buffers, out of cache, measured 0.08–0.11
/// ns/B).
pub const DEFAULT_COPY_PER_BYTE: f64 = 0.1e-9;

/// Per-byte time of a reduction on the development machine: 0.1 ns/B (an
/// `f64` sum of 4 MiB buffers, out of cache, measured 0.08–0.11 ns/B; the
/// sum is bound by memory like a copy).
pub const DEFAULT_REDUCE_PER_BYTE: f64 = 0.1e-9;

impl Default for CostModel {
    /// Shared memory inside a node ([`LogGp::SHM`]) and AF_XDP between
    /// nodes ([`LogGp::AFXDP`]), as measured on the development machine,
    /// with [`DEFAULT_COPY_PER_BYTE`] and [`DEFAULT_REDUCE_PER_BYTE`].
    fn default() -> CostModel {
        CostModel {
            intra: LogGp::SHM,
            inter: LogGp::AFXDP,
            copy_per_byte: DEFAULT_COPY_PER_BYTE,
            reduce_per_byte: DEFAULT_REDUCE_PER_BYTE,
        }
    }
}

/// The keys of a `[coll.loggp.intra]` or `[coll.loggp.inter]` table.
const PATH_KEYS: [&str; 5] = ["l_us", "o_s_us", "o_r_us", "g_us", "big_g_ns_per_byte"];
/// The keys of the `[coll.loggp]` table itself.
const LOCAL_KEYS: [&str; 2] = ["copy_ns_per_byte", "reduce_ns_per_byte"];

impl CostModel {
    /// The parameters of `link`.
    pub fn link(&self, link: Link) -> &LogGp {
        match link {
            Link::Intra => &self.intra,
            Link::Inter => &self.inter,
        }
    }

    /// The default model with `intra` and `inter` taken from two
    /// `bcl-loggp --json` reports (see [`LogGp::from_loggp_json`]).
    pub fn from_loggp_json(intra: &str, inter: &str) -> Result<CostModel, CostError> {
        Ok(CostModel {
            intra: LogGp::from_loggp_json("intra-node report", intra)?,
            inter: LogGp::from_loggp_json("inter-node report", inter)?,
            ..CostModel::default()
        })
    }

    /// Reads [`CostModel::from_toml`] from the file `path`.
    pub fn from_toml_file(path: &Path) -> Result<CostModel, CostError> {
        let text = std::fs::read_to_string(path).map_err(|e| CostError::Config {
            file: path.display().to_string(),
            field: "-".into(),
            message: e.to_string(),
        })?;
        CostModel::from_toml(&path.display().to_string(), &text)
    }

    /// The model of the TOML text `text` (from the file named `file`, for
    /// errors). Other tables of the file are ignored; parameters absent
    /// from it keep their defaults:
    ///
    /// ```toml
    /// [coll.loggp]              # optional
    /// copy_ns_per_byte = 0.1    # optional
    /// reduce_ns_per_byte = 0.1  # optional
    /// [coll.loggp.intra]        # optional; all five keys when present
    /// l_us = -0.09
    /// o_s_us = 0.126
    /// o_r_us = 0.215
    /// g_us = 0.431
    /// big_g_ns_per_byte = 1.2
    /// [coll.loggp.inter]        # the same keys
    /// ```
    pub fn from_toml(file: &str, text: &str) -> Result<CostModel, CostError> {
        let err = |field: &str, message: String| CostError::Config {
            file: file.to_string(),
            field: field.to_string(),
            message,
        };
        let doc: toml::Table =
            toml::from_str(text).map_err(|e| err("-", e.message().to_string()))?;
        let mut model = CostModel::default();
        let Some(coll) = doc.get("coll") else {
            return Ok(model);
        };
        let coll = coll
            .as_table()
            .ok_or_else(|| err("coll", "expected a table".into()))?;
        let Some(loggp) = coll.get("loggp") else {
            return Ok(model);
        };
        let loggp = loggp
            .as_table()
            .ok_or_else(|| err("coll.loggp", "expected a table".into()))?;
        let number = |field: &str, v: &toml::Value| -> Result<f64, CostError> {
            match v {
                toml::Value::Float(f) => Ok(*f),
                toml::Value::Integer(i) => Ok(*i as f64),
                other => Err(err(
                    field,
                    format!("expected a number, found a {}", other.type_str()),
                )),
            }
        };
        for (key, value) in loggp {
            let field = format!("coll.loggp.{key}");
            match key.as_str() {
                "intra" | "inter" => {
                    let t = value
                        .as_table()
                        .ok_or_else(|| err(&field, "expected a table".into()))?;
                    if let Some(k) = t.keys().find(|k| !PATH_KEYS.contains(&k.as_str())) {
                        return Err(err(
                            &format!("{field}.{k}"),
                            format!("unknown key (expected {})", PATH_KEYS.join(", ")),
                        ));
                    }
                    let mut v = [0.0; 5];
                    for (i, k) in PATH_KEYS.iter().enumerate() {
                        let f = format!("{field}.{k}");
                        let x = t.get(*k).ok_or_else(|| err(&f, "missing".into()))?;
                        v[i] = number(&f, x)?;
                    }
                    let p = LogGp::from_us(v[0], v[1], v[2], v[3], v[4]).map_err(|e| {
                        let CostError::Parameter { field: p, .. } = &e else {
                            return err(&field, e.to_string());
                        };
                        let k = match *p {
                            "l" => "l_us",
                            "o_s" => "o_s_us",
                            "o_r" => "o_r_us",
                            "g" => "g_us",
                            _ => "big_g_ns_per_byte",
                        };
                        err(&format!("{field}.{k}"), e.to_string())
                    })?;
                    if key == "intra" {
                        model.intra = p;
                    } else {
                        model.inter = p;
                    }
                }
                "copy_ns_per_byte" | "reduce_ns_per_byte" => {
                    let x = number(&field, value)?;
                    if !x.is_finite() || x < 0.0 {
                        return Err(err(&field, format!("{x} is not a time (≥ 0)")));
                    }
                    if key == "copy_ns_per_byte" {
                        model.copy_per_byte = x * 1e-9;
                    } else {
                        model.reduce_per_byte = x * 1e-9;
                    }
                }
                _ => {
                    return Err(err(
                        &field,
                        format!(
                            "unknown key (expected intra, inter, {})",
                            LOCAL_KEYS.join(", ")
                        ),
                    ))
                }
            }
        }
        Ok(model)
    }
}
