//! Runs the schedules of every rank of a communicator in memory, with no
//! network: the reference interpreter of [`super::schedule`]'s semantics.
//!
//! Tests use it to check an algorithm against a sequential reference for
//! hundreds of (size, root, length) cases in milliseconds; the network
//! engine must give the same bytes. Messages between two ranks are matched
//! in order: the k-th message rank s sends rank d in one operation is the
//! k-th receive d posts for s.

use super::op::{Datatype, Op};
use super::schedule::{Combine, Schedule, Step, OUTPUT};
use std::collections::VecDeque;

/// Why a set of schedules cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    /// No rank can go on and some are not finished.
    #[error("deadlock: {0}")]
    Deadlock(String),
    /// A message's length differs from the receive's range.
    #[error("rank {to} expected {expected} bytes from rank {from} and got {got}")]
    Length {
        /// Receiver.
        to: usize,
        /// Sender.
        from: usize,
        /// The receive's length.
        expected: usize,
        /// The message's length.
        got: usize,
    },
    /// A step names a buffer or range that does not exist.
    #[error("rank {rank}: {what}")]
    Bounds {
        /// The rank.
        rank: usize,
        /// What was out of bounds.
        what: String,
    },
    /// A reduction step without an operation, or a failed reduction.
    #[error("rank {rank}: reduction: {what}")]
    Reduce {
        /// The rank.
        rank: usize,
        /// Why.
        what: String,
    },
    /// Messages were sent that nobody received.
    #[error("{0} messages were sent and never received")]
    Unreceived(usize),
}

/// The reduction of an operation, if it has one.
pub type Reduction<'a> = Option<(&'a Op, Datatype)>;

/// Buffers of one rank while its schedule runs.
pub(crate) struct Buffers {
    /// INPUT, OUTPUT, then scratch.
    pub bufs: Vec<Vec<u8>>,
    scratch: Vec<u8>,
    /// A local step's source when it lies in its destination buffer.
    staging: Vec<u8>,
}

impl Buffers {
    /// Buffers for `schedule` with `input` and an output of `output_len`
    /// bytes (zeroed).
    pub fn new(schedule: &Schedule, input: Vec<u8>, output_len: usize) -> Buffers {
        Buffers::from_pool(
            schedule,
            input,
            output_len,
            &mut super::pool::Pool::default(),
        )
    }

    /// No buffers (what a finished operation keeps).
    pub fn empty() -> Buffers {
        Buffers {
            bufs: Vec::new(),
            scratch: Vec::new(),
            staging: Vec::new(),
        }
    }

    /// As [`Buffers::new`], with zeroed buffers from `pool`.
    pub fn from_pool(
        schedule: &Schedule,
        input: Vec<u8>,
        output_len: usize,
        pool: &mut super::pool::Pool,
    ) -> Buffers {
        let mut bufs = vec![input, pool.take_zeroed(output_len)];
        bufs.extend(schedule.scratch.iter().map(|&n| pool.take_zeroed(n)));
        Buffers {
            bufs,
            scratch: Vec::new(),
            staging: Vec::new(),
        }
    }

    /// Gives every buffer but the output back to `pool`, and returns the
    /// output.
    pub fn into_output(self, pool: &mut super::pool::Pool) -> Vec<u8> {
        let mut output = Vec::new();
        for (i, b) in self.bufs.into_iter().enumerate() {
            if i == OUTPUT {
                output = b;
            } else {
                pool.give(b);
            }
        }
        output
    }

    /// Puts `data` in place of the whole buffer `buf` when it replaces all
    /// of it, and returns the buffer it displaced; otherwise returns `data`
    /// untouched for [`Buffers::write`].
    pub fn swap_whole(
        &mut self,
        buf: usize,
        range: &std::ops::Range<usize>,
        data: Vec<u8>,
    ) -> Result<Vec<u8>, Vec<u8>> {
        match self.bufs.get_mut(buf) {
            Some(b) if range.start == 0 && range.end == b.len() && data.len() == b.len() => {
                Ok(std::mem::replace(b, data))
            }
            _ => Err(data),
        }
    }

    /// The bytes `buf[range]`, checked.
    pub fn slice(&self, buf: usize, range: std::ops::Range<usize>) -> Result<&[u8], String> {
        self.bufs
            .get(buf)
            .and_then(|b| b.get(range.clone()))
            .ok_or_else(|| format!("buffer {buf} range {range:?} out of bounds"))
    }

    /// Runs a local step (copy or reduce). The source is read in place
    /// when it is another buffer than the destination, else through a
    /// staging buffer kept for reuse: no allocation per step.
    pub fn local(&mut self, step: &Step, red: Reduction) -> Result<(), String> {
        let (from, range, to, at, how) = match *step {
            Step::Copy {
                from,
                ref range,
                to,
                at,
            } => (from, range.clone(), to, at, Combine::Replace),
            Step::Reduce {
                from,
                ref range,
                to,
                at,
                from_is_left,
            } => {
                let how = if from_is_left {
                    Combine::IncomingLeft
                } else {
                    Combine::IncomingRight
                };
                (from, range.clone(), to, at, how)
            }
            _ => return Ok(()),
        };
        if from == to {
            let mut staging = std::mem::take(&mut self.staging);
            staging.clear();
            staging.extend_from_slice(self.slice(from, range)?);
            let r = self.write(to, at, &staging, how, red);
            self.staging = staging;
            return r;
        }
        let src = std::mem::take(
            self.bufs
                .get_mut(from)
                .ok_or_else(|| format!("buffer {from} out of bounds"))?,
        );
        let r = match src.get(range.clone()) {
            Some(data) => self.write(to, at, data, how, red),
            None => Err(format!("buffer {from} range {range:?} out of bounds")),
        };
        self.bufs[from] = src;
        r
    }

    /// Writes or combines `data` into `buf[at..]`.
    pub fn write(
        &mut self,
        buf: usize,
        at: usize,
        data: &[u8],
        how: Combine,
        red: Reduction,
    ) -> Result<(), String> {
        let dst = self
            .bufs
            .get_mut(buf)
            .and_then(|b| b.get_mut(at..at + data.len()))
            .ok_or_else(|| format!("buffer {buf} range {at}..{} out of bounds", at + data.len()))?;
        match how {
            Combine::Replace => {
                dst.copy_from_slice(data);
                Ok(())
            }
            Combine::IncomingLeft | Combine::IncomingRight => {
                let (op, dt) = red.ok_or("a combining step in an operation without reduction")?;
                let r = if how == Combine::IncomingLeft {
                    op.combine_into_right(dt, data, dst)
                } else {
                    op.combine_into_left(dt, dst, data, &mut self.scratch)
                };
                r.map_err(|e| e.to_string())
            }
        }
    }
}

/// Runs `schedules` (index = rank) with `inputs`; rank r's output buffer has
/// `output_lens[r]` bytes, zeroed. Returns every rank's output buffer.
pub fn run(
    schedules: &[Schedule],
    inputs: Vec<Vec<u8>>,
    output_lens: &[usize],
    red: Reduction,
) -> Result<Vec<Vec<u8>>, SimError> {
    let p = schedules.len();
    let mut bufs: Vec<Buffers> = schedules
        .iter()
        .zip(inputs)
        .zip(output_lens)
        .map(|((s, input), &n)| Buffers::new(s, input, n))
        .collect();
    // queues[from][to]: messages in flight.
    let mut queues: Vec<Vec<VecDeque<Vec<u8>>>> = vec![vec![VecDeque::new(); p]; p];
    // Per rank: next round, and whether its sends are out.
    let mut round = vec![0usize; p];
    let mut started = vec![false; p];
    loop {
        let mut moved = false;
        for r in 0..p {
            let Some(rd) = schedules[r].rounds.get(round[r]) else {
                continue;
            };
            if !started[r] {
                for step in &rd.steps {
                    bufs[r]
                        .local(step, red)
                        .map_err(|what| local_error(r, what, red))?;
                }
                for step in &rd.steps {
                    if let Step::Send { to, buf, range } = step {
                        let data = bufs[r]
                            .slice(*buf, range.clone())
                            .map_err(|what| SimError::Bounds { rank: r, what })?
                            .to_vec();
                        let q = queues[r].get_mut(*to).ok_or(SimError::Bounds {
                            rank: r,
                            what: format!("send to rank {to} of {p}"),
                        })?;
                        q.push_back(data);
                    }
                }
                started[r] = true;
                moved = true;
            }
            // Can every receive of the round be matched?
            let mut need = vec![0usize; p];
            for step in &rd.steps {
                if let Step::Recv { from, .. } = step {
                    if *from >= p {
                        return Err(SimError::Bounds {
                            rank: r,
                            what: format!("receive from rank {from} of {p}"),
                        });
                    }
                    need[*from] += 1;
                }
            }
            if (0..p).any(|s| queues[s][r].len() < need[s]) {
                continue;
            }
            for step in &rd.steps {
                if let Step::Recv {
                    from,
                    buf,
                    range,
                    combine,
                } = step
                {
                    let data = queues[*from][r].pop_front().expect("counted above");
                    if data.len() != range.len() {
                        return Err(SimError::Length {
                            to: r,
                            from: *from,
                            expected: range.len(),
                            got: data.len(),
                        });
                    }
                    bufs[r]
                        .write(*buf, range.start, &data, *combine, red)
                        .map_err(|what| local_error(r, what, red))?;
                }
            }
            round[r] += 1;
            started[r] = false;
            moved = true;
        }
        if (0..p).all(|r| round[r] == schedules[r].rounds.len()) {
            let left: usize = queues.iter().flatten().map(VecDeque::len).sum();
            if left > 0 {
                return Err(SimError::Unreceived(left));
            }
            return Ok(bufs
                .into_iter()
                .map(|mut b| b.bufs.swap_remove(OUTPUT))
                .collect());
        }
        if !moved {
            let waiting: Vec<String> = (0..p)
                .filter(|&r| round[r] < schedules[r].rounds.len())
                .take(4)
                .map(|r| format!("rank {r} in round {}", round[r]))
                .collect();
            return Err(SimError::Deadlock(waiting.join(", ")));
        }
    }
}

fn local_error(rank: usize, what: String, red: Reduction) -> SimError {
    if red.is_none() || what.contains("bounds") {
        SimError::Bounds { rank, what }
    } else {
        SimError::Reduce { rank, what }
    }
}
