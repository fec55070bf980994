//! The worker threads of threaded handlers: jobs go out on a channel, the
//! answers come back on another, and an eventfd counts the answers waiting
//! so that the endpoint (asleep in blocking mode, or an event loop on its
//! descriptor) wakes to send them.

use super::wire::{Kind, ServiceHeader};
use super::ThreadedHandler;
use bcl_core::ProcessAddr;
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex};

/// A request for the pool.
pub(super) struct Job {
    pub from: ProcessAddr,
    pub handler_id: u32,
    pub request: u32,
    pub payload: Vec<u8>,
    pub handler: ThreadedHandler,
}

/// An answer to send: a reply or an error reply, header included.
pub(super) struct Answer {
    pub to: ProcessAddr,
    pub handler_id: u32,
    pub message: Vec<u8>,
}

/// The worker threads.
pub(super) struct Pool {
    jobs: Option<mpsc::Sender<Job>>,
    answers: mpsc::Receiver<Answer>,
    /// Readable while answers wait: wakes the endpoint.
    pub ready: Arc<EventFd>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Pool {
    pub fn new(workers: usize) -> std::io::Result<Pool> {
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (answers_tx, answers) = mpsc::channel();
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let ready = Arc::new(
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?,
        );
        let threads = (0..workers.max(1))
            .map(|i| -> std::io::Result<_> {
                let jobs = jobs_rx.clone();
                let answers = answers_tx.clone();
                let ready = ready.clone();
                std::thread::Builder::new()
                    .name(format!("bcl-rsr-{i}"))
                    .spawn(move || loop {
                        let job = {
                            let rx = jobs.lock().unwrap_or_else(|e| e.into_inner());
                            rx.recv()
                        };
                        let Ok(job) = job else { return };
                        let mut message = Vec::new();
                        run_handler(job.handler_id, job.request, &mut message, |out| {
                            out.extend_from_slice(&(job.handler)(job.from, &job.payload))
                        });
                        let answer = Answer {
                            to: job.from,
                            handler_id: job.handler_id,
                            message,
                        };
                        if answers.send(answer).is_err() {
                            return;
                        }
                        // Cannot fail short of a counter at 2^64 - 1.
                        let _ = ready.write(1);
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Pool {
            jobs: Some(jobs_tx),
            answers,
            ready,
            threads,
        })
    }

    /// Hands `job` to a worker; false if the workers are gone.
    pub fn start(&self, job: Job) -> bool {
        self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok())
    }

    /// The answers finished since the last call (the eventfd counts them:
    /// a worker queues, then counts, so exactly that many are there).
    pub fn finished(&self) -> impl Iterator<Item = Answer> + '_ {
        let ready = self.ready.read().unwrap_or(0);
        (0..ready).map_while(|_| self.answers.recv().ok())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing the job queue ends every worker after its current job.
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Runs a handler that writes its reply after the reply header already in
/// `out`, catching a panic: `out` then holds an error reply instead.
#[inline]
pub(super) fn run_handler(
    handler_id: u32,
    request: u32,
    out: &mut Vec<u8>,
    f: impl FnOnce(&mut Vec<u8>),
) {
    out.clear();
    ServiceHeader::new(Kind::Reply, handler_id, request).write(out);
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| f(out))) {
        panicked(handler_id, request, out, panic);
    }
}

/// Replaces the reply in `out` by the error reply of a handler's panic.
#[cold]
#[inline(never)]
fn panicked(
    handler_id: u32,
    request: u32,
    out: &mut Vec<u8>,
    panic: Box<dyn std::any::Any + Send>,
) {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    super::wire::error_reply(out, handler_id, request, super::ERROR_PANICKED, &message);
}
