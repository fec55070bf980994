//! One collective operation in progress: its schedule, buffers and the
//! messages of the current round.
//!
//! [`Running::advance`] is called after every progress round of the
//! messenger; it starts rounds (local steps, then all sends and receives),
//! collects arrivals and, when a round's receives are all in, writes them
//! into place in step order — the semantics of [`super::schedule`], the same
//! as the in-memory interpreter's ([`super::sim`]).

use super::comm::Comm;
use super::error::CollError;
use super::messenger::{Messenger, RecvId, SendId};
use super::op::{Datatype, Op};
use super::schedule::{Combine, Schedule, Step};
use super::sim::Buffers;

/// A collective operation in progress.
pub(crate) struct Running {
    comm: Comm,
    schedule: std::sync::Arc<Schedule>,
    bufs: Buffers,
    reduction: Option<(Op, Datatype)>,
    /// Context and tag of its messages.
    context: u32,
    tag: u64,
    /// The round running, and whether its sends and receives are out.
    round: usize,
    started: bool,
    /// Receives of the round: step index, receive, and the data once in.
    recvs: Vec<(usize, RecvId, Option<Vec<u8>>)>,
    /// Sends not yet complete (large messages).
    sends: Vec<SendId>,
}

/// How far an operation got.
pub(crate) enum Advance {
    /// Waiting for messages.
    Pending,
    /// Done; the output buffer.
    Done(Vec<u8>),
}

impl Running {
    /// An operation of `comm` with its schedule, input and output length;
    /// its messages carry `tag` in the communicator's collective context.
    pub fn new(
        comm: Comm,
        schedule: std::sync::Arc<Schedule>,
        (input, output_len): (Vec<u8>, usize),
        reduction: Option<(Op, Datatype)>,
        tag: u64,
        pool: &mut super::pool::Pool,
    ) -> Running {
        let context = comm.coll_context();
        let bufs = Buffers::from_pool(&schedule, input, output_len, pool);
        Running {
            comm,
            schedule,
            bufs,
            reduction,
            context,
            tag,
            round: 0,
            started: false,
            recvs: Vec::new(),
            sends: Vec::new(),
        }
    }

    /// The communicator it runs on.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// Moves the operation as far as the messages that arrived allow.
    pub fn advance(&mut self, msg: &mut Messenger) -> Result<Advance, CollError> {
        loop {
            let Some(round) = self.schedule.rounds.get(self.round) else {
                return self.finish(msg);
            };
            if !self.started {
                let red = self.reduction.as_ref().map(|(op, dt)| (op, *dt));
                for step in &round.steps {
                    self.bufs.local(step, red).map_err(CollError::Invalid)?;
                }
                for (i, step) in round.steps.iter().enumerate() {
                    match step {
                        Step::Send { to, buf, range } => {
                            let data = self
                                .bufs
                                .slice(*buf, range.clone())
                                .map_err(CollError::Invalid)?;
                            let dst = self.comm.addr(*to)?;
                            let id = msg.isend(dst, self.context, self.tag, data)?;
                            if id != SendId::COMPLETE {
                                self.sends.push(id);
                            }
                        }
                        Step::Recv { from, .. } => {
                            let src = self.comm.addr(*from)?;
                            let id = msg.irecv(src, self.context, self.tag)?;
                            self.recvs.push((i, id, None));
                        }
                        _ => {}
                    }
                }
                self.started = true;
            }
            let mut all_in = true;
            for (_, id, data) in &mut self.recvs {
                if data.is_none() {
                    match msg.take_recv(*id) {
                        Some(r) => *data = Some(r?),
                        None => all_in = false,
                    }
                }
            }
            reap_sends(&mut self.sends, msg)?;
            if !all_in {
                return Ok(Advance::Pending);
            }
            let red = self.reduction.as_ref().map(|(op, dt)| (op, *dt));
            for (i, _, data) in self.recvs.drain(..) {
                let Step::Recv {
                    from,
                    buf,
                    ref range,
                    combine,
                } = round.steps[i]
                else {
                    unreachable!("recvs hold receive steps");
                };
                let data = data.expect("all in");
                if data.len() != range.len() {
                    return Err(CollError::Length {
                        from: self.comm.addr(from)?,
                        expected: range.len(),
                        got: data.len(),
                    });
                }
                let data = match combine {
                    Combine::Replace => match self.bufs.swap_whole(buf, range, data) {
                        Ok(old) => {
                            msg.pool.give(old);
                            continue;
                        }
                        Err(data) => data,
                    },
                    _ => data,
                };
                self.bufs
                    .write(buf, range.start, &data, combine, red)
                    .map_err(CollError::Invalid)?;
                msg.pool.give(data);
            }
            self.round += 1;
            self.started = false;
        }
    }

    fn finish(&mut self, msg: &mut Messenger) -> Result<Advance, CollError> {
        reap_sends(&mut self.sends, msg)?;
        if !self.sends.is_empty() {
            return Ok(Advance::Pending);
        }
        let bufs = std::mem::replace(&mut self.bufs, Buffers::empty());
        Ok(Advance::Done(bufs.into_output(&mut msg.pool)))
    }
}

/// Forgets the sends that completed; the first failure among them is the
/// operation's.
fn reap_sends(sends: &mut Vec<SendId>, msg: &mut Messenger) -> Result<(), CollError> {
    {
        let mut err = None;
        sends.retain(|id| match msg.take_send(*id) {
            Some(Ok(())) => false,
            Some(Err(e)) => {
                err.get_or_insert(e);
                false
            }
            None => true,
        });
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
