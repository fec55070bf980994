//! Congestion control: how many frames may be in flight to a peer, and how
//! fast they leave, judged from the queueing delay its round trips show.
//!
//! BCL-3 ran on Myrinet, whose link-level back-pressure never dropped a
//! frame, so a fixed send window was enough. Commodity Ethernet drops when a
//! queue overflows, and raw Ethernet frames carry no ECN bits, so the signal
//! here is delay, in the lineage of Swift (and of Falcon, which builds on
//! it):
//!
//! - **Window.** Each peer has a congestion window, in 1/64ths of a frame,
//!   which bounds the frames in flight below the configured `tx_window`. A
//!   round-trip sample whose queueing delay (the sample minus the path's
//!   base round trip) is under the target grows it additively,
//!   `additive_increase` frames per window acknowledged. Once per round
//!   trip the round's least sample is judged: a queueing delay over the
//!   target shrinks the window in proportion to the excess, `1 − β·(delay
//!   − target)/delay`, never below `1 − max_decrease`. The least sample,
//!   because a queue that stands shows in every sample, while a frame held
//!   back by reordering, or an acknowledgement a busy receiver sent late,
//!   shows in a few.
//! - **Target.** `target_delay`, plus up to `flow_scaling` more as the
//!   window shrinks towards one frame (in 1/sqrt(window), as Swift scales
//!   it): a sender with a small share tolerates more queueing than one with
//!   a large share, so the large one gives way first.
//! - **Slow start.** A new peer's window starts at `initial_window` and
//!   doubles per round trip until a round shows half the target of
//!   queueing or the window first shrinks. The window is kept while the
//!   peer is idle, so only the first exchange with a peer ramps up.
//! - **Base round trip.** The least sample seen; a sample at or below it
//!   starts a new epoch. At the end of an epoch (`base_epoch` of continuous
//!   activity, and at least [`EPOCH_BASE_RTTS`] base round trips) the
//!   epoch's least sample replaces it, so a path that became longer is
//!   followed. A new route forgets it.
//! - **Base probe.** A sender that measured its base while others kept a
//!   queue takes that queue for the path's own delay, tolerates more than
//!   the others and starves them (the latecomer bias of every delay
//!   signal). So a sender that saw a queue in the epoch (a round with
//!   half the target of queueing delay) ends it with a probe, as BBR's
//!   ProbeRTT does: in flight falls to `min_window` until everything sent
//!   before the probe is acknowledged, one more round trip is measured at
//!   that window, and the window is restored. Its own share of the queue gone,
//!   the sender sees the queue the others keep, mostly at their smallest
//!   windows when it was the one taking too much. The drain also shows
//!   every other sender through that queue a sample at or below its base,
//!   which restarts their epochs: their probes fall together after that,
//!   and together they see the path empty. A probe costs some two round
//!   trips at a small window per epoch: under 2 % of the time on paths of
//!   up to 100 µs (epochs of `base_epoch`), under 8 % on longer ones.
//!   Epochs are counted in base round trips on long paths so that the
//!   probe stays that cheap, but in 25 of them, not more: a latecomer's
//!   base is inflated by the very queue it should see, and so are its
//!   epochs. At 100 base round trips, a sender that had measured 450 µs
//!   behind a queue on a 110 µs path waited 45 ms for its probe while the
//!   first sender sat at the smallest window; over 1,200 random incast
//!   cases in the simulator, Jain's index fell under 0.9 in 1.6 % of them
//!   at 25, against 10 % at 100. What 25 costs a lone sender that keeps a
//!   queue, in the same simulator: 0.2–1.9 % of its goodput on paths of
//!   120–260 µs, 4.7 % on one of 400 µs.
//! - **Loss.** A frame judged lost, or a timeout, halves the window too
//!   (once per round trip) if a sample of this round or the last showed a
//!   queue of at least half the target (delayed acknowledgements alone add
//!   some): a queue too short for the target still
//!   drops, while a loss with no queue at all is random or corruption and
//!   costs no bandwidth. Two timeouts in a row behind a queue leave the
//!   smallest window, in slow start again up to half the window before.
//!   If the peer then reports the frames resent after a loss judgement as
//!   duplicates, they were only overtaken (reordering) and the decrease is
//!   undone, as TCP does on D-SACK; a timeout is never undone (a round trip
//!   that outgrew the timeout is a queue growing).
//! - **Pacing.** A window that congestion shrank below two bursts (and
//!   below `tx_window`) is paced: frames leave no faster than 5/4 of the
//!   window per round trip (the smoothed one, at most base plus target),
//!   with `pacing_burst` frames allowed back to back. A peer idle long
//!   enough has the whole burst available, so a lone message never waits;
//!   larger windows are clocked by their acknowledgements.
//!
//! Why delay and a window rather than receiver grants (Homa): the window
//! needs no extra frames, no wire change and no receiver state, keeps the
//! per-peer idle state at 4 bytes ([`Congestion`]; the pacing and per-round
//! state live in the pooled [`TxWindow`](super::peer::TxWindow) while
//! frames fly), and treats every bottleneck alike, the receiver's own link
//! or one in the middle. Senders into one receiver see the same queue and
//! increase and decrease alike (additive increase, multiplicative
//! decrease), which evens their shares out.
//!
//! Known limits. Until its first probe, a sender that started while others
//! kept a queue takes more than its share (flow scaling narrows that, the
//! probe ends it). Receiver grants would avoid it at the price of a wire
//! change.

//! **When it acts** ([`CongestionConfig::mode`]). `on` controls every
//! sequenced peer from its first frame. `auto` starts a peer
//! *dormant*: its window only grows, in slow start from the initial window
//! up to the configured bound, whatever the delay, unpaced (BCL-3's fixed
//! window after a few round trips); its samples keep only the base and the
//! latest one. It wakes, at half the window it had in flight, past slow
//! start, on its first frame judged lost (a timeout alone does not wake
//! it: behind a deep queue of other dormant senders' windows a latecomer's
//! round trip outgrows its timeout again and again while nothing is lost;
//! a real tail loss shows as a judged loss once the timeout's probe of the
//! newest frame is delivered), or when the receiver reports frames
//! missing on their way to it from any sender (the header flag `CONGESTED`,
//! which a port sets on its frames for 50 ms after a gap in a peer's
//! stream): senders into one receiver that never lose a frame themselves
//! would otherwise keep their windows while the woken ones yield to the
//! queue those windows keep. Awake, it is controlled as with `on` for as
//! long as the port knows the peer, except that a wake by a loss is undone
//! (dormant again, with the window before) if the peer reports the frames
//! resent for it as duplicates: they were only reordered.
//!
//! Why not `on` everywhere: measured here, control keeps a shaped switch's
//! queue short under incast (probe p99 about 6 × idle instead of 70 ×,
//! 0.2 % resent instead of 27 %), but it costs throughput where the round
//! trip carries delay that is not a queue: on a plain veth with blocking
//! engines, whose round trips include both ends' wake-ups, `on` reaches
//! 0.34–0.54 × the fixed window's bandwidth (busy-polling engines reach
//! about the fixed window's); through the lab's user-space impairment bridge, a forwarder that
//! batches more the longer its queue, about 0.4 ×. A path that never drops
//! a frame never pays for that under `auto`; one whose queue overflows is
//! controlled from its first overflow. In the simulator's random incasts
//! `auto` converges as fairly as `on` after that overflow
//! (`tests/congestion_sim.rs`). `off` is the fixed window throughout, and
//! the default: woken by one loss, `auto` pays `on`'s cost from then on,
//! and through a slow forwarder that loses at random (10 % in the lab's
//! bridge) a controlled window of a few frames turns most losses into
//! timeouts, 5–10 × slower than `off`. Only
//! peers whose frames are sequenced (methods that may
//! lose) are controlled: a method that never loses (shared memory) has its
//! own flow control and no queue to drop from.

use std::time::Duration;

use crate::rtt::nanos32;
use crate::seq::Seq;
use crate::time::Time;

/// Window unit: frames are counted in 1/64ths (14 bits hold 255 frames,
/// all but one of the largest send window).
const UNIT: u64 = 64;

/// The largest window in units (14 bits; the 15th marks a dormant peer, the
/// 16th slow start over).
const WINDOW_MAX: u16 = 0x3fff;

/// In [`Congestion::bits`]: slow start is over.
const SLOW_START_OVER: u16 = 0x8000;

/// In [`Congestion::bits`]: the peer is dormant ([`CongestionMode::Auto`],
/// no congestion seen yet): its window only grows, in slow start, up to the
/// configured bound, unpaced.
const DORMANT: u16 = 0x4000;

/// Frames a peer held back by pacing sends per wake-up.
const PACED_BATCH: u32 = 4;

/// Measuring rounds during which a loss decrease may still be undone.
const UNDO_ROUNDS: u8 = 2;

/// An epoch of the base round trip lasts at least this many base round
/// trips, so that a probe (some two round trips at a small window) costs
/// under 8 % of the time; few enough that a base inflated by others'
/// queue (which stretches the epoch as much) is measured again soon.
const EPOCH_BASE_RTTS: u64 = 25;

/// Pacing runs at this multiple of window per round trip (numerator and
/// denominator), so a window that is not limited is never slowed by pacing.
const PACING_GAIN: (u64, u64) = (5, 4);

/// When the congestion controller acts (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CongestionMode {
    /// Never: BCL-3's fixed window, unpaced, for every peer (the default).
    #[default]
    Off,
    /// Per peer, from its first frame judged lost, or from its receiver's
    /// report of frames missing; until then a window that only grows (slow
    /// start up to the bound), unpaced.
    Auto,
    /// From a peer's first frame.
    On,
}

impl CongestionMode {
    /// The mode a setting names: `off`, `auto` or `on` (also `0`/`1`,
    /// `no`/`yes`, `false`/`true`), in any case; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "no" | "false" => Some(CongestionMode::Off),
            "auto" => Some(CongestionMode::Auto),
            "on" | "1" | "yes" | "true" => Some(CongestionMode::On),
            _ => None,
        }
    }

    /// The name [`CongestionMode::parse`] reads back.
    pub fn name(self) -> &'static str {
        match self {
            CongestionMode::Off => "off",
            CongestionMode::Auto => "auto",
            CongestionMode::On => "on",
        }
    }
}

/// How the congestion controller behaves: part of
/// [`PortConfig`](crate::PortConfig).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CongestionConfig {
    /// When to control congestion (default [`CongestionMode::Off`]; see
    /// the module documentation for why `auto` is not the default yet).
    /// Controlled, a
    /// shared bottleneck or many senders into one receiver keep short
    /// queues and resend little; not controlled, a forwarder in software
    /// (whose throughput grows with its queue) is not held to a short
    /// queue. `BCL_CONGESTION=off|auto|on` sets it for a process.
    pub mode: CongestionMode,
    /// Queueing delay the window aims at: the round trip above the path's
    /// base at which it stops growing (default 100 µs).
    pub target_delay: Duration,
    /// Extra queueing delay a window of one frame tolerates over
    /// `target_delay`, falling in 1/sqrt(window) to none at `tx_window`
    /// (default 100 µs; zero turns the scaling off).
    pub flow_scaling: Duration,
    /// Frames the window grows by per window of frames acknowledged under
    /// the target, i.e. per round trip (default 1).
    pub additive_increase: u32,
    /// β in thousandths: how hard a delay over the target shrinks the
    /// window (default 800, Swift's 0.8).
    pub beta_permille: u32,
    /// Largest decrease at once in thousandths, also the decrease after a
    /// loss (default 500: halve).
    pub max_decrease_permille: u32,
    /// Smallest window in frames (default 2; never more than `tx_window`).
    pub min_window: u32,
    /// Window in frames of a peer never sent to (default 16; 0 means
    /// `tx_window`, the bound). It doubles per round trip (slow start)
    /// until a queue starts to form (delay over half the target) or the
    /// window first shrinks, and grows additively from then on.
    pub initial_window: u32,
    /// Frames that may leave back to back before pacing spaces them
    /// (default 16).
    pub pacing_burst: u32,
    /// How long the base round trip stands before it is measured afresh
    /// (by a probe if the epoch showed a queue) and the least sample of the
    /// latest epoch replaces it; at least 25 base round trips (default
    /// 10 ms).
    pub base_epoch: Duration,
}

impl Default for CongestionConfig {
    fn default() -> Self {
        CongestionConfig {
            mode: CongestionMode::Off,
            target_delay: Duration::from_micros(100),
            flow_scaling: Duration::from_micros(100),
            additive_increase: 1,
            beta_permille: 800,
            max_decrease_permille: 500,
            min_window: 2,
            initial_window: 16,
            pacing_burst: 16,
            base_epoch: Duration::from_millis(10),
        }
    }
}

impl CongestionConfig {
    /// Whether any peer may be controlled (the mode is not `off`).
    pub fn controls(&self) -> bool {
        self.mode != CongestionMode::Off
    }

    /// The first field that cannot work and why, given the send window
    /// bound `tx_window`.
    pub(crate) fn problem(&self, tx_window: u32) -> Option<(&'static str, String)> {
        if self.target_delay.is_zero() {
            return Some(("congestion.target_delay", "must be positive".into()));
        }
        if self.additive_increase == 0 || self.additive_increase > tx_window {
            return Some((
                "congestion.additive_increase",
                format!("is {}, must be 1..={tx_window}", self.additive_increase),
            ));
        }
        if self.beta_permille > 1000 {
            return Some((
                "congestion.beta_permille",
                format!("is {}, must be at most 1000", self.beta_permille),
            ));
        }
        if self.max_decrease_permille == 0 || self.max_decrease_permille >= 1000 {
            return Some((
                "congestion.max_decrease_permille",
                format!("is {}, must be 1..=999", self.max_decrease_permille),
            ));
        }
        if self.min_window == 0 {
            return Some(("congestion.min_window", "must be at least 1".into()));
        }
        if self.initial_window != 0 && self.initial_window < self.min_window {
            return Some((
                "congestion.initial_window",
                format!(
                    "is {}, must be 0 (tx_window) or at least min_window ({})",
                    self.initial_window, self.min_window
                ),
            ));
        }
        if self.pacing_burst == 0 {
            return Some(("congestion.pacing_burst", "must be at least 1".into()));
        }
        if self.base_epoch.is_zero() {
            return Some(("congestion.base_epoch", "must be positive".into()));
        }
        None
    }

    /// The window of a new peer, in frames.
    fn initial_frames(&self, tx_window: u32) -> u32 {
        if self.initial_window == 0 {
            tx_window
        } else {
            self.initial_window.min(tx_window)
        }
    }
}

/// What a port keeps about congestion on the path to one peer, also while
/// the peer is idle: 4 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Congestion {
    /// Frames allowed in flight, in 1/64ths (the low 14 bits), whether the
    /// peer is dormant (bit 14) and whether slow start is over (the top
    /// bit).
    bits: u16,
    /// The path's round trip without queueing (0: no sample yet).
    base_rtt: CompactNanos,
}

/// A duration of up to 2^32 ns in 16 bits, as a tiny float: an 11-bit
/// mantissa shifted by a 5-bit exponent, rounded down (relative error under
/// 1/1024). Keeps the idle per-peer state small.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CompactNanos(u16);

impl CompactNanos {
    const MANTISSA_BITS: u32 = 11;

    /// `ns`, rounded down to what 16 bits hold.
    pub fn new(ns: u32) -> Self {
        let shift = (32 - ns.leading_zeros()).saturating_sub(Self::MANTISSA_BITS);
        CompactNanos(((shift << Self::MANTISSA_BITS) | (ns >> shift)) as u16)
    }

    /// The value in nanoseconds.
    pub fn get(self) -> u32 {
        let mantissa = u32::from(self.0) & ((1 << Self::MANTISSA_BITS) - 1);
        mantissa << (u32::from(self.0) >> Self::MANTISSA_BITS)
    }
}

/// The controller's state while frames fly to a peer; it lives in the
/// pooled send window and starts afresh when the peer was idle.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CongestionRound {
    /// Earliest instant the next frame may leave (pacing).
    pace_at: Time,
    /// The pacing interval last used, in nanoseconds.
    pace_interval: u32,
    /// New data waits for pacing until this instant: the peer needs a timer
    /// then (`Time::NEVER`: it does not).
    pub wake: Time,
    /// No decrease before the cumulative acknowledgement reaches this
    /// point, when `holding` (once per round trip).
    decrease_end: Seq,
    holding: bool,
    /// The measuring round: it ends when the cumulative acknowledgement
    /// reaches `round_end` (when `round_open`); `round_min` is its least
    /// sample, the delay judged at its end.
    round_end: Seq,
    round_open: bool,
    round_min: u32,
    /// The latest sample (in nanoseconds; 0: none): the queue a loss is
    /// judged by (it went through the queue just after the lost frame).
    last_sample: u32,
    /// The window (with the slow-start bit) before a loss or a timeout
    /// shrank it (0: none), restored
    /// if the peer reports the resent frames as duplicates (they were not
    /// lost, only late: reordering, or a receiver that stalled), within
    /// `undo_rounds` measuring rounds.
    undo: u16,
    undo_rounds: u8,
    /// Slow start after timeouts ends at this window, in units (half the
    /// window before them; 0: no such limit).
    slow_start_limit: u16,
    /// Start of the current base-round-trip epoch, and its least sample.
    epoch_start: Time,
    epoch_min: u32,
    /// A measuring round of this epoch showed a queue (delay over half the
    /// target): the epoch ends with a probe.
    queue_seen: bool,
    /// The base probe under way, if any.
    probe: Probe,
}

/// Where a base probe stands (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// No probe.
    Off,
    /// In flight falls to the smallest window until the acknowledgement
    /// covers everything sent before the probe (up to this point).
    Draining(Seq),
    /// Frames sent at the smallest window are measured until the
    /// acknowledgement reaches this point.
    Measuring(Seq),
}

impl Default for CongestionRound {
    fn default() -> Self {
        CongestionRound {
            pace_at: Time::ZERO,
            pace_interval: 0,
            wake: Time::NEVER,
            decrease_end: Seq(0),
            holding: false,
            round_end: Seq(0),
            round_open: false,
            round_min: u32::MAX,
            last_sample: 0,
            undo: 0,
            undo_rounds: 0,
            slow_start_limit: 0,
            epoch_start: Time::NEVER,
            epoch_min: u32::MAX,
            queue_seen: false,
            probe: Probe::Off,
        }
    }
}

/// What one call changed, for the port's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The window grew or stayed.
    Steady,
    /// The window shrank.
    Decreased,
}

impl Congestion {
    /// A peer never heard from: no base, and the configured initial window
    /// (mode `on`), or dormant (mode `auto`, see [`Congestion::is_dormant`]).
    pub fn new(cfg: &CongestionConfig, tx_window: u32) -> Self {
        let window = Self::units(cfg.initial_frames(tx_window));
        let bits = match cfg.mode {
            CongestionMode::Auto => DORMANT | window,
            CongestionMode::Off | CongestionMode::On => window,
        };
        Congestion {
            bits,
            base_rtt: CompactNanos::default(),
        }
    }

    /// Whether the peer is not controlled yet ([`CongestionMode::Auto`]
    /// until its path shows congestion): its window grows in slow start up
    /// to the configured bound whatever the delay, unpaced.
    pub fn is_dormant(&self) -> bool {
        self.bits & DORMANT != 0
    }

    /// Whole frames the window allows in flight under the bound
    /// `tx_window`, not counting a base probe's limit.
    pub fn limit_frames(&self, tx_window: u32) -> u32 {
        self.window_frames().min(tx_window)
    }

    /// While dormant, a round-trip sample that newly acknowledged `acked`
    /// frames grows the window by as many (slow start, up to `max_frames`)
    /// and keeps the base (the least sample) and the latest sample, which
    /// the controller starts from when it wakes.
    fn observe_dormant(
        &mut self,
        round: &mut CongestionRound,
        sample: u32,
        acked: u32,
        max_frames: u32,
    ) {
        let old_base = self.base_rtt.get();
        if old_base == 0 || CompactNanos::new(sample).get() <= old_base {
            self.base_rtt = CompactNanos::new(sample);
        }
        round.last_sample = sample;
        self.grow_dormant(acked, max_frames);
    }

    /// A dormant window grows by the `acked` frames newly acknowledged
    /// (slow start, doubling per round trip), up to `max_frames`.
    pub fn grow_dormant(&mut self, acked: u32, max_frames: u32) {
        let cap = u64::from(Self::units(max_frames));
        let grown = (u64::from(self.window()) + UNIT * u64::from(acked)).min(cap);
        self.set_window(grown.max(u64::from(self.window())) as u16);
    }

    /// The peer reported frames missing on their way to it, from any
    /// sender ([`flags::CONGESTED`](crate::wire::flags::CONGESTED)): a
    /// dormant controller wakes as after a loss of its own. Not undone:
    /// the frames missing were not ours, so our duplicates say nothing
    /// about them.
    pub fn on_congestion_echo(
        &mut self,
        cfg: &CongestionConfig,
        round: &mut CongestionRound,
        una: Seq,
        next: Seq,
    ) -> Verdict {
        if !self.is_dormant() {
            return Verdict::Steady;
        }
        self.wake(cfg, round, una, next, false)
    }

    /// A loss or an echo while dormant: control starts at half the window
    /// in flight (the lesser of the window and `next − una`; at least
    /// `min_window`), past slow start, with no decrease for this round
    /// trip. `undoable`: if duplicates later show that the frames resent
    /// had arrived (reordering), the peer is dormant again, with the window
    /// it had.
    fn wake(
        &mut self,
        cfg: &CongestionConfig,
        round: &mut CongestionRound,
        una: Seq,
        next: Seq,
        undoable: bool,
    ) -> Verdict {
        if undoable {
            round.undo = self.bits;
            round.undo_rounds = UNDO_ROUNDS;
        } else {
            round.undo = 0;
        }
        let in_flight = next.since(una).unwrap_or(0);
        let half = (in_flight.min(self.window_frames()) / 2).max(cfg.min_window);
        self.bits = SLOW_START_OVER | Self::units(half);
        round.decrease_end = next;
        round.holding = true;
        Verdict::Decreased
    }

    /// `frames` in window units.
    fn units(frames: u32) -> u16 {
        u16::try_from(u64::from(frames) * UNIT)
            .unwrap_or(WINDOW_MAX)
            .min(WINDOW_MAX)
    }

    /// The window in units.
    fn window(&self) -> u16 {
        self.bits & WINDOW_MAX
    }

    fn set_window(&mut self, units: u16) {
        self.bits = (self.bits & !WINDOW_MAX) | units.min(WINDOW_MAX);
    }

    /// Whether the window still doubles per round trip (no decrease yet).
    pub fn in_slow_start(&self) -> bool {
        self.bits & SLOW_START_OVER == 0
    }

    /// Whole frames allowed in flight (at least one), not counting a base
    /// probe's limit (see [`Congestion::allowed_frames`]).
    pub fn window_frames(&self) -> u32 {
        (u32::from(self.window()) / UNIT as u32).max(1)
    }

    /// Frames that may be in flight now: the window, or the smallest
    /// window while a base probe (`round`, when frames fly) is under way.
    pub fn allowed_frames(&self, cfg: &CongestionConfig, round: Option<&CongestionRound>) -> u32 {
        let window = self.window_frames();
        match round.map(|r| r.probe) {
            Some(Probe::Draining(_) | Probe::Measuring(_)) => window.min(cfg.min_window),
            _ => window,
        }
    }

    /// Whether a base probe is under way.
    #[cfg(test)]
    fn probing(round: &CongestionRound) -> bool {
        round.probe != Probe::Off
    }

    /// Advances the base probe with an acknowledgement at `una` (`next`:
    /// the next sequence to be sent), and starts one when the epoch is
    /// over and it saw a queue. Returns whether a probe is
    /// (still) under way: its samples only measure the base.
    fn advance_probe(
        &mut self,
        cfg: &CongestionConfig,
        round: &mut CongestionRound,
        una: Seq,
        next: Seq,
        now: Time,
    ) -> bool {
        match round.probe {
            Probe::Draining(mark) => {
                if !una.before(mark) {
                    round.probe = Probe::Measuring(next);
                }
                true
            }
            Probe::Measuring(mark) => {
                if una.before(mark) {
                    return true;
                }
                // Done: the epoch's least sample, the probe's included, is
                // the base from now on; the round judged next starts afresh.
                self.renew_base(round, now);
                round.probe = Probe::Off;
                round.round_open = false;
                round.round_min = u32::MAX;
                round.holding = false;
                false
            }
            Probe::Off => {
                if !self.epoch_over(cfg, round, now) {
                    return false;
                }
                if round.queue_seen && !self.in_slow_start() {
                    round.probe = Probe::Draining(next);
                    return true;
                }
                // No queue seen: the epoch's least sample is the base
                // without a probe.
                self.renew_base(round, now);
                false
            }
        }
    }

    /// Whether the current epoch has lasted `base_epoch` and at least
    /// [`EPOCH_BASE_RTTS`] base round trips.
    fn epoch_over(&self, cfg: &CongestionConfig, round: &CongestionRound, now: Time) -> bool {
        let length = cfg.base_epoch.max(Duration::from_nanos(
            u64::from(self.base_rtt.get()) * EPOCH_BASE_RTTS,
        ));
        now.saturating_since(round.epoch_start) >= length
    }

    /// Ends the epoch: its least sample is the base from now on.
    fn renew_base(&mut self, round: &mut CongestionRound, now: Time) {
        self.base_rtt = CompactNanos::new(round.epoch_min);
        self.restart_epoch(round, now);
    }

    fn restart_epoch(&self, round: &mut CongestionRound, now: Time) {
        round.epoch_start = now;
        round.epoch_min = u32::MAX;
        round.queue_seen = false;
    }

    /// The path's base round trip, once measured.
    pub fn base_rtt(&self) -> Option<Duration> {
        let ns = self.base_rtt.get();
        (ns != 0).then(|| Duration::from_nanos(u64::from(ns)))
    }

    /// The route changed: the old path's base round trip says nothing
    /// about the new one.
    pub fn forget_base(&mut self) {
        self.base_rtt = CompactNanos::default();
    }

    fn may_decrease(round: &CongestionRound, una: Seq) -> bool {
        !round.holding || !una.before(round.decrease_end)
    }

    fn decrease(&mut self, round: &mut CongestionRound, permille: u64, floor: u32, next: Seq) {
        let kept = (u64::from(self.window()) * (1000 - permille.min(1000)) / 1000) as u16;
        // Never below the floor, and a decrease never grows the window.
        let floor = Self::units(floor).min(self.window());
        self.set_window(kept.max(floor));
        self.bits |= SLOW_START_OVER;
        round.decrease_end = next;
        round.holding = true;
    }

    /// A round-trip sample `rtt` arrived with an acknowledgement that newly
    /// covered `acked` frames; `una` and `next` are the sender's window
    /// after it. `max_frames` bounds the window.
    #[allow(clippy::too_many_arguments)]
    pub fn on_round_trip(
        &mut self,
        cfg: &CongestionConfig,
        round: &mut CongestionRound,
        rtt: Duration,
        acked: u32,
        una: Seq,
        next: Seq,
        now: Time,
        max_frames: u32,
    ) -> Verdict {
        let sample = nanos32(rtt).max(1);
        if self.is_dormant() {
            self.observe_dormant(round, sample, acked, max_frames);
            return Verdict::Steady;
        }
        // The base: the least sample; one at or below it starts a new
        // epoch (the queue was empty just now, or as short as ever), and
        // the end of an epoch measures the base afresh.
        if round.epoch_start == Time::NEVER {
            round.epoch_start = now;
        }
        let old_base = self.base_rtt.get();
        if old_base == 0 || CompactNanos::new(sample).get() <= old_base {
            self.base_rtt = CompactNanos::new(sample);
            self.restart_epoch(round, now);
        }
        round.epoch_min = round.epoch_min.min(sample);
        if self.advance_probe(cfg, round, una, next, now) {
            round.last_sample = sample;
            return Verdict::Steady;
        }
        let base = self.base_rtt.get();
        let target = self.target_ns(cfg, max_frames);
        if u64::from(sample.saturating_sub(base)) <= target {
            let window = u64::from(self.window().max(1));
            let grow = if self.in_slow_start() {
                // Slow start: a frame per frame acknowledged, doubling per
                // round trip.
                UNIT * u64::from(acked)
            } else {
                // Additive increase: `additive_increase` frames per window
                // of frames acknowledged, rounded up so that a large window
                // still grows by whole units.
                (u64::from(cfg.additive_increase) * UNIT * UNIT * u64::from(acked)).div_ceil(window)
            };
            let cap = u64::from(Self::units(max_frames));
            self.set_window((window + grow).min(cap) as u16);
            if self.in_slow_start()
                && round.slow_start_limit != 0
                && self.window() >= round.slow_start_limit
            {
                self.bits |= SLOW_START_OVER;
                round.slow_start_limit = 0;
            }
        }
        // The decrease is judged once per round trip, by the round's least
        // sample: a queue that stands shows in every sample, while a frame
        // held back by reordering or an acknowledgement delayed by a busy
        // receiver shows in a few only.
        round.round_min = round.round_min.min(sample);
        round.last_sample = sample;
        if !round.round_open {
            round.round_open = true;
            round.round_end = next;
            return Verdict::Steady;
        }
        if una.before(round.round_end) {
            return Verdict::Steady;
        }
        let delay = u64::from(round.round_min.saturating_sub(base));
        round.round_end = next;
        round.round_min = u32::MAX;
        if round.undo != 0 {
            round.undo_rounds = round.undo_rounds.saturating_sub(1);
            if round.undo_rounds == 0 {
                round.undo = 0;
            }
        }
        if delay > target / 2 {
            round.queue_seen = true;
            if self.in_slow_start() {
                // A queue starts to form: the path is full, grow gently now.
                self.bits |= SLOW_START_OVER;
            }
        }
        if delay <= target || !Self::may_decrease(round, una) {
            return Verdict::Steady;
        }
        // Proportional to the excess over the target, at most max_decrease.
        let excess = u64::from(cfg.beta_permille) * (delay - target) / delay;
        let permille = excess.min(u64::from(cfg.max_decrease_permille));
        if permille == 0 {
            return Verdict::Steady;
        }
        self.decrease(round, permille, cfg.min_window, next);
        // A queue, not a loss that may turn out spurious: nothing to undo.
        round.undo = 0;
        Verdict::Decreased
    }

    /// Remembers the window before a loss shrinks it, for
    /// [`Congestion::on_spurious_resend`].
    fn arm_undo(&self, round: &mut CongestionRound) {
        if round.undo == 0 {
            round.undo = self.bits;
        }
        round.undo_rounds = UNDO_ROUNDS;
    }

    /// The peer reported duplicates: frames resent after a loss judgement
    /// or a timeout had arrived after all. The decrease they caused is
    /// undone (as TCP does on D-SACK), so reordering or a stalled receiver
    /// does not cost bandwidth. Returns whether the window grew back.
    pub fn on_spurious_resend(&mut self, round: &mut CongestionRound) -> bool {
        if round.undo == 0 {
            return false;
        }
        if round.undo & DORMANT != 0 {
            // What woke the controller was reordering, or a round trip that
            // outgrew the timeout: dormant again, with the window before.
            self.bits = round.undo;
            round.undo = 0;
            round.holding = false;
            return true;
        }
        // Back to the window and the slow start from before the decrease.
        let grew = round.undo & WINDOW_MAX > self.window();
        if grew {
            self.bits = round.undo;
        }
        round.undo = 0;
        round.holding = false;
        grew
    }

    /// The queueing delay this window aims at: the configured target, plus
    /// up to `flow_scaling` more as the window shrinks towards one frame
    /// (in 1/sqrt(window), as Swift scales it). A sender that got a small
    /// share tolerates more delay than one with a large share, so the large
    /// one gives way first and the shares even out, also when the senders'
    /// base round trips were measured at different queue levels.
    fn target_ns(&self, cfg: &CongestionConfig, max_frames: u32) -> u64 {
        let base = u64::try_from(cfg.target_delay.as_nanos()).unwrap_or(u64::MAX);
        let range = u64::try_from(cfg.flow_scaling.as_nanos()).unwrap_or(u64::MAX) as f64;
        if range == 0.0 {
            return base;
        }
        let inv = |frames: f64| 1.0 / frames.max(1.0).sqrt();
        let window = f64::from(self.window()) / UNIT as f64;
        let span = inv(1.0) - inv(f64::from(max_frames));
        if span <= 0.0 {
            return base;
        }
        let scale = ((inv(window) - inv(f64::from(max_frames))) / span).clamp(0.0, 1.0);
        base.saturating_add((range * scale) as u64)
    }

    /// Whether a loss looks like congestion: the latest round-trip sample
    /// (of a frame that crossed the queue after the lost one) showed a queue
    /// of at least half the target over the base (delayed acknowledgements
    /// alone add some), or nothing is measured yet. A queue that overflows
    /// is full just then; a frame lost with no queue at all was corrupted or
    /// dropped at random, and shrinking the window for it would only cost
    /// bandwidth.
    fn loss_is_congestion(&self, cfg: &CongestionConfig, round: &CongestionRound) -> bool {
        let Some(base) = self.base_rtt() else {
            return true;
        };
        if round.last_sample == 0 {
            return true;
        }
        let queue = Duration::from_nanos(u64::from(round.last_sample)).saturating_sub(base);
        queue * 2 >= cfg.target_delay
    }

    /// A frame was judged lost (by time and sequence): shrink by the most
    /// allowed, once per round trip, if a queue stood.
    pub fn on_loss(
        &mut self,
        cfg: &CongestionConfig,
        round: &mut CongestionRound,
        una: Seq,
        next: Seq,
    ) -> Verdict {
        if self.is_dormant() {
            return self.wake(cfg, round, una, next, true);
        }
        if !Self::may_decrease(round, una) || !self.loss_is_congestion(cfg, round) {
            return Verdict::Steady;
        }
        self.arm_undo(round);
        self.decrease(
            round,
            u64::from(cfg.max_decrease_permille),
            cfg.min_window,
            next,
        );
        Verdict::Decreased
    }

    /// A retransmission timeout fired, the `consecutive`th in a row. If a
    /// queue stood, the first shrinks the window as a loss does and a second
    /// in a row leaves the smallest window; without a queue it is a lost
    /// frame with nothing after it to reveal the loss, not congestion.
    pub fn on_timeout(
        &mut self,
        cfg: &CongestionConfig,
        round: &mut CongestionRound,
        consecutive: u16,
        una: Seq,
        next: Seq,
    ) -> Verdict {
        // A timeout is not undone, even if what it resent turns out to have
        // arrived: a round trip that outgrew the timeout is a queue growing
        // (or a receiver that stalled), and a window restored into it would
        // time out again. The exception is a wake from dormant by a loss,
        // which further timeouts do not make final.
        if round.undo & DORMANT == 0 {
            round.undo = 0;
        }
        if self.is_dormant() {
            // A timeout does not wake a dormant peer. Behind a deep queue
            // of other dormant senders' windows, a latecomer's round trip
            // outgrows its timeout again and again while nothing is lost;
            // each wake (even undone later) cut its slow start short, and
            // it starved. A real tail loss shows soon after all the same:
            // the timeout's probe resends the newest frame, and its
            // delivery has the frames before it judged lost.
            return Verdict::Steady;
        }
        if !self.loss_is_congestion(cfg, round) {
            return Verdict::Steady;
        }
        if consecutive >= 2 {
            // Start over from the smallest window, in slow start up to
            // half the window before (as TCP does after a timeout): the
            // queue that stood may be gone by the time anything gets
            // through.
            round.slow_start_limit = (self.window() / 2).max(Self::units(cfg.min_window));
            self.set_window(Self::units(cfg.min_window));
            self.bits &= !SLOW_START_OVER;
            round.decrease_end = next;
            round.holding = true;
            return Verdict::Decreased;
        }
        if !Self::may_decrease(round, una) {
            return Verdict::Steady;
        }
        self.decrease(
            round,
            u64::from(cfg.max_decrease_permille),
            cfg.min_window,
            next,
        );
        Verdict::Decreased
    }

    /// Time between paced frames (zero: no pacing). Only a small window is
    /// paced, one that congestion shrank below two bursts (and below the
    /// bound `max_frames`): it is the one whose bursts fill a queue before
    /// the delay shows. A larger window is clocked by its acknowledgements,
    /// which come back spaced by the bottleneck, and pacing it would only
    /// add timer wake-ups (each costs the timer slack when the engine
    /// sleeps, some 50 µs). The round trip paced by is the smoothed one,
    /// but at most the base plus the target delay, so that late samples
    /// (reordering, a busy receiver) do not slow pacing below what the
    /// window allows.
    fn pacing_interval(
        &self,
        cfg: &CongestionConfig,
        srtt: Option<Duration>,
        max_frames: u32,
    ) -> u64 {
        let Some(srtt) = srtt else { return 0 };
        if self.is_dormant() {
            return 0;
        }
        let paced_below = Self::units(max_frames).min(Self::units(2 * cfg.pacing_burst));
        if self.window() >= paced_below {
            return 0;
        }
        let mut rtt = u64::try_from(srtt.as_nanos()).unwrap_or(u64::MAX);
        if let Some(base) = self.base_rtt() {
            rtt = rtt.min(u64::try_from((base + cfg.target_delay).as_nanos()).unwrap_or(u64::MAX));
        }
        rtt.saturating_mul(UNIT * PACING_GAIN.1) / (u64::from(self.window().max(1)) * PACING_GAIN.0)
    }

    /// When a new frame may leave: `None` now, else the instant pacing
    /// allows it.
    /// Held back by pacing, the peer waits until a few frames' worth of
    /// interval has passed ([`PACED_BATCH`]), not one: each wait is a
    /// timer wake-up, which costs more than the interval when the engine
    /// sleeps, and a handful of frames back to back fill no queue.
    pub fn paced_until(&self, round: &CongestionRound, now: Time) -> Option<Time> {
        (round.pace_at > now).then(|| {
            let batch = u64::from(round.pace_interval) * u64::from(PACED_BATCH - 1);
            round.pace_at + Duration::from_nanos(batch)
        })
    }

    /// A DATA frame left at `now`: the next one is due one interval later,
    /// once the burst allowance is used up.
    pub fn on_sent(
        &self,
        cfg: &CongestionConfig,
        round: &mut CongestionRound,
        now: Time,
        srtt: Option<Duration>,
        max_frames: u32,
    ) {
        let interval = self.pacing_interval(cfg, srtt, max_frames);
        if interval == 0 {
            return;
        }
        let allowance = interval.saturating_mul(u64::from(cfg.pacing_burst));
        let floor = Time::from_nanos(now.as_nanos().saturating_sub(allowance));
        round.pace_at = round.pace_at.max(floor) + Duration::from_nanos(interval);
        round.pace_interval = u32::try_from(interval).unwrap_or(u32::MAX);
    }

    /// The rate pacing allows, in frames per second (`None`: not paced).
    pub fn pacing_rate(
        &self,
        cfg: &CongestionConfig,
        srtt: Option<Duration>,
        max_frames: u32,
    ) -> Option<f64> {
        let interval = self.pacing_interval(cfg, srtt, max_frames);
        (interval > 0).then(|| 1e9 / interval as f64)
    }

    /// Queueing delay the smoothed round trip shows over the base.
    pub fn queueing_delay(&self, srtt: Option<Duration>) -> Option<Duration> {
        let base = self.base_rtt()?;
        Some(srtt?.saturating_sub(base))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// The defaults, controlling every peer from its first frame.
    fn always() -> CongestionConfig {
        CongestionConfig {
            mode: CongestionMode::On,
            ..CongestionConfig::default()
        }
    }

    fn setup(window: u32) -> (CongestionConfig, Congestion, CongestionRound) {
        let cfg = CongestionConfig {
            initial_window: window,
            flow_scaling: Duration::ZERO,
            ..always()
        };
        let mut cc = Congestion::new(&cfg, 128);
        cc.bits |= SLOW_START_OVER;
        (cfg, cc, CongestionRound::default())
    }

    #[test]
    fn slow_start_doubles_per_round_trip_until_a_queue_forms() {
        let cfg = always();
        let mut cc = Congestion::new(&cfg, 128);
        let mut round = CongestionRound::default();
        assert_eq!(cc.window_frames(), 16);
        // A round trip's worth of acknowledgements, no queue: doubled.
        cc.on_round_trip(
            &cfg,
            &mut round,
            30 * US,
            16,
            Seq(16),
            Seq(32),
            Time::ZERO,
            128,
        );
        assert_eq!(cc.window_frames(), 32);
        cc.on_round_trip(
            &cfg,
            &mut round,
            30 * US,
            32,
            Seq(48),
            Seq(80),
            Time::ZERO,
            128,
        );
        assert_eq!(cc.window_frames(), 64);
        // A round whose least sample shows half the target of queueing:
        // slow start is over, additive from now on.
        cc.on_round_trip(
            &cfg,
            &mut round,
            90 * US,
            0,
            Seq(80),
            Seq(144),
            Time::ZERO,
            128,
        );
        cc.on_round_trip(
            &cfg,
            &mut round,
            90 * US,
            0,
            Seq(144),
            Seq(144),
            Time::ZERO,
            128,
        );
        assert!(!cc.in_slow_start());
        assert_eq!(cc.window_frames(), 64);
        // Never past the bound.
        let mut cc = Congestion::new(&cfg, 20);
        cc.on_round_trip(
            &cfg,
            &mut round,
            30 * US,
            16,
            Seq(16),
            Seq(32),
            Time::ZERO,
            20,
        );
        assert_eq!(cc.window_frames(), 20);
    }

    #[test]
    fn compact_nanos_keep_eleven_bits() {
        for ns in [0u32, 1, 2047, 2048, 2049, 30_000, 123_456_789, u32::MAX] {
            let back = CompactNanos::new(ns).get();
            assert!(back <= ns, "{ns} came back as {back}");
            assert!(
                u64::from(ns - back) * 1024 <= u64::from(ns),
                "{ns} -> {back}"
            );
        }
    }

    #[test]
    fn under_the_target_the_window_grows_one_frame_per_window_acknowledged() {
        let (cfg, mut cc, mut round) = setup(10);
        // Eleven frames acknowledged one at a time, no queueing: a window and
        // a bit (the window grows on the way), one frame more.
        for i in 0..11 {
            let v = cc.on_round_trip(
                &cfg,
                &mut round,
                30 * US,
                1,
                Seq(i + 1),
                Seq(20),
                Time::ZERO,
                128,
            );
            assert_eq!(v, Verdict::Steady);
        }
        assert_eq!(cc.window_frames(), 11, "{cc:?}");
        assert_eq!(cc.base_rtt(), Some(30 * US));
    }

    #[test]
    fn the_window_never_passes_the_bound() {
        let (cfg, mut cc, mut round) = setup(128);
        for i in 0..1000 {
            cc.on_round_trip(
                &cfg,
                &mut round,
                30 * US,
                16,
                Seq(i),
                Seq(i + 128),
                Time::ZERO,
                128,
            );
        }
        assert_eq!(cc.window_frames(), 128);
    }

    #[test]
    fn a_standing_queue_shrinks_the_window_in_proportion_once_per_round_trip() {
        let (cfg, mut cc, mut round) = setup(100);
        let mut rt = |cc: &mut Congestion, us: u64, una: u32, next: u32| {
            cc.on_round_trip(
                &cfg,
                &mut round,
                Duration::from_micros(us),
                1,
                Seq(una),
                Seq(next),
                Time::ZERO,
                128,
            )
        };
        // The first sample (50 µs: the base) opens a round up to frame 10.
        assert_eq!(rt(&mut cc, 50, 1, 10), Verdict::Steady);
        // Its least sample was the base: no queue, whatever came later.
        assert_eq!(rt(&mut cc, 250, 5, 100), Verdict::Steady);
        assert_eq!(rt(&mut cc, 250, 10, 100), Verdict::Steady);
        assert_eq!(cc.window_frames(), 100);
        // A round (to frame 100) in which every sample saw 200 µs of
        // queueing, 100 over the target: 1 - 0.8 * 100/200 = 0.6.
        assert_eq!(rt(&mut cc, 250, 50, 120), Verdict::Steady);
        assert_eq!(rt(&mut cc, 250, 100, 130), Verdict::Decreased);
        assert_eq!(cc.window_frames(), 60);
        // The next round: at most halved, however large the delay.
        assert_eq!(rt(&mut cc, 900, 120, 140), Verdict::Steady);
        assert_eq!(rt(&mut cc, 5000, 130, 150), Verdict::Decreased);
        assert_eq!(cc.window_frames(), 30);
    }

    #[test]
    fn a_few_late_samples_in_a_round_are_not_a_queue() {
        let (cfg, mut cc, mut round) = setup(100);
        let mut rt = |cc: &mut Congestion, us: u64, una: u32| {
            cc.on_round_trip(
                &cfg,
                &mut round,
                Duration::from_micros(us),
                1,
                Seq(una),
                Seq(200),
                Time::ZERO,
                128,
            )
        };
        rt(&mut cc, 50, 1);
        // Frames held back by reordering: late samples among timely ones.
        for una in 2..200 {
            let us = if una % 7 == 0 { 400 } else { 55 };
            assert_eq!(rt(&mut cc, us, una), Verdict::Steady);
        }
        assert!(cc.window_frames() > 100);
    }

    #[test]
    fn loss_halves_and_repeated_timeouts_leave_the_smallest_window() {
        let (cfg, mut cc, mut round) = setup(100);
        assert_eq!(
            cc.on_loss(&cfg, &mut round, Seq(0), Seq(100)),
            Verdict::Decreased
        );
        assert_eq!(cc.window_frames(), 50);
        assert_eq!(
            cc.on_loss(&cfg, &mut round, Seq(10), Seq(100)),
            Verdict::Steady
        );
        assert_eq!(
            cc.on_timeout(&cfg, &mut round, 2, Seq(10), Seq(100)),
            Verdict::Decreased
        );
        assert_eq!(cc.window_frames(), cfg.min_window);
        // Never below the smallest window.
        assert_eq!(
            cc.on_loss(&cfg, &mut round, Seq(100), Seq(101)),
            Verdict::Decreased
        );
        assert_eq!(cc.window_frames(), cfg.min_window);
    }

    #[test]
    fn the_base_follows_a_longer_path_after_an_epoch() {
        let (cfg, mut cc, mut round) = setup(10);
        cc.on_round_trip(
            &cfg,
            &mut round,
            30 * US,
            1,
            Seq(1),
            Seq(9),
            Time::ZERO,
            128,
        );
        let later = Time::ZERO + cfg.base_epoch / 2;
        cc.on_round_trip(&cfg, &mut round, 80 * US, 1, Seq(2), Seq(9), later, 128);
        assert_eq!(cc.base_rtt(), Some(30 * US));
        let end = Time::ZERO + cfg.base_epoch;
        cc.on_round_trip(&cfg, &mut round, 90 * US, 1, Seq(3), Seq(9), end, 128);
        // The epoch's least sample (30 µs was its first) stands...
        assert_eq!(cc.base_rtt(), Some(30 * US));
        // ...and the next epoch, which saw only 80 µs and more, replaces it.
        let next = end + cfg.base_epoch / 2;
        cc.on_round_trip(&cfg, &mut round, 80 * US, 1, Seq(4), Seq(9), next, 128);
        cc.on_round_trip(
            &cfg,
            &mut round,
            85 * US,
            1,
            Seq(5),
            Seq(9),
            end + cfg.base_epoch,
            128,
        );
        assert_eq!(cc.base_rtt(), Some(80 * US));
        cc.forget_base();
        assert_eq!(cc.base_rtt(), None);
    }

    #[test]
    fn a_sender_that_saw_a_queue_probes_for_the_base_at_the_end_of_the_epoch() {
        let (cfg, mut cc, mut round) = setup(20);
        let rtt = |cc: &mut Congestion, round: &mut CongestionRound, us, una, next, t| {
            cc.on_round_trip(&cfg, round, us * US, 1, Seq(una), Seq(next), t, 128)
        };
        // The base was measured behind the queue other senders keep: 128 µs,
        // where the path's own is 40. Then a round shows 72 µs of queueing
        // (over half the target, under the target: no decrease).
        let t = Time::ZERO;
        rtt(&mut cc, &mut round, 128, 1, 20, t);
        rtt(&mut cc, &mut round, 200, 20, 40, t + 200 * US);
        rtt(&mut cc, &mut round, 200, 40, 60, t + 400 * US);
        let window = cc.window_frames();
        assert_eq!(cc.allowed_frames(&cfg, Some(&round)), window);
        assert!(!Congestion::probing(&round));
        // The epoch ends (the configured 10 ms, longer than 25 base round
        // trips): in flight falls to the smallest window.
        let end = Time::ZERO + cfg.base_epoch;
        rtt(&mut cc, &mut round, 200, 41, 60, Time::ZERO + 9_900 * US);
        assert!(!Congestion::probing(&round));
        rtt(&mut cc, &mut round, 200, 41, 60, end);
        assert!(Congestion::probing(&round));
        assert_eq!(cc.allowed_frames(&cfg, Some(&round)), cfg.min_window);
        // Samples while the window drains change nothing.
        rtt(&mut cc, &mut round, 150, 50, 60, end);
        assert_eq!(cc.window_frames(), window);
        assert_eq!(cc.base_rtt(), Some(128 * US));
        // All sent before the probe acknowledged (frames 60 and 61 went out
        // at the smallest window): measuring.
        rtt(&mut cc, &mut round, 100, 60, 62, end);
        assert!(Congestion::probing(&round));
        // They see the path empty: the base drops at once.
        rtt(&mut cc, &mut round, 40, 61, 62, end);
        assert_eq!(cc.base_rtt(), Some(40 * US));
        assert!(Congestion::probing(&round));
        // Both acknowledged: the probe is over, the window back.
        rtt(&mut cc, &mut round, 45, 62, 62, end);
        assert!(!Congestion::probing(&round));
        assert_eq!(cc.allowed_frames(&cfg, Some(&round)), window);
        assert_eq!(cc.base_rtt(), Some(40 * US));
        // Without a round (the peer idle) there is no probe either.
        assert_eq!(cc.allowed_frames(&cfg, None), window);
    }

    #[test]
    fn a_sender_that_saw_no_queue_does_not_probe() {
        let (cfg, mut cc, mut round) = setup(20);
        cc.on_round_trip(
            &cfg,
            &mut round,
            30 * US,
            1,
            Seq(1),
            Seq(20),
            Time::ZERO,
            128,
        );
        let t = Time::ZERO + 100 * US;
        cc.on_round_trip(&cfg, &mut round, 40 * US, 1, Seq(20), Seq(40), t, 128);
        let end = Time::ZERO + cfg.base_epoch;
        cc.on_round_trip(&cfg, &mut round, 35 * US, 1, Seq(21), Seq(40), end, 128);
        assert!(!Congestion::probing(&round));
        assert_eq!(cc.allowed_frames(&cfg, Some(&round)), cc.window_frames());
        assert_eq!(cc.base_rtt(), Some(30 * US));
    }

    #[test]
    fn an_epoch_lasts_at_least_twenty_five_base_round_trips() {
        let (cfg, mut cc, mut round) = setup(20);
        let rtt = |cc: &mut Congestion, round: &mut CongestionRound, us, una, next, t| {
            cc.on_round_trip(&cfg, round, us * US, 1, Seq(una), Seq(next), t, 128)
        };
        // A 1 ms path with a queue: the epoch is 25 ms, not the configured
        // 10 ms.
        let t = Time::ZERO;
        rtt(&mut cc, &mut round, 1000, 1, 20, t);
        rtt(&mut cc, &mut round, 1070, 20, 40, t + 1000 * US);
        rtt(&mut cc, &mut round, 1070, 40, 60, t + 2000 * US);
        rtt(&mut cc, &mut round, 1070, 41, 60, t + cfg.base_epoch * 2);
        assert!(!Congestion::probing(&round));
        rtt(
            &mut cc,
            &mut round,
            1070,
            42,
            60,
            t + Duration::from_millis(25),
        );
        assert!(Congestion::probing(&round));
    }

    #[test]
    fn pacing_lets_a_burst_go_then_spaces_frames() {
        let (cfg, cc, mut round) = setup(16);
        let srtt = Some(100 * US);
        let now = Time::from_nanos(1_000_000);
        // A lone frame of an idle peer never waits.
        assert_eq!(cc.paced_until(&round, now), None);
        let mut sent = 0;
        while cc.paced_until(&round, now).is_none() {
            cc.on_sent(&cfg, &mut round, now, srtt, 128);
            sent += 1;
            assert!(sent < 100);
        }
        assert_eq!(sent, cfg.pacing_burst + 1);
        // 16 frames per 100 µs at a gain of 5/4: one every 5 µs, and the
        // peer waits for four of them at once.
        let at = cc.paced_until(&round, now).unwrap();
        assert_eq!(at.saturating_since(now), 20 * US);
        assert_eq!(cc.pacing_rate(&cfg, srtt, 128), Some(200_000.0));
        // Without a round-trip sample there is nothing to pace by, and a
        // window at its bound (no congestion seen) is not paced.
        for (srtt, bound) in [(None, 128), (srtt, 16)] {
            let (cfg, cc, mut round) = setup(16);
            for _ in 0..100 {
                cc.on_sent(&cfg, &mut round, now, srtt, bound);
            }
            assert_eq!(cc.paced_until(&round, now), None);
        }
    }

    #[test]
    fn pacing_goes_by_at_most_the_base_plus_the_target() {
        let (cfg, mut cc, mut round) = setup(16);
        cc.on_round_trip(
            &cfg,
            &mut round,
            50 * US,
            0,
            Seq(1),
            Seq(9),
            Time::ZERO,
            128,
        );
        // A smoothed round trip inflated by late samples: paced as if 150 µs.
        let rate = cc.pacing_rate(&cfg, Some(1000 * US), 128).unwrap();
        let expected = 16.0 * 1.25 / 150e-6;
        assert!((rate / expected - 1.0).abs() < 1e-3, "{rate} vs {expected}");
    }

    #[test]
    fn a_loss_decrease_is_undone_when_the_resends_were_duplicates() {
        let (cfg, mut cc, mut round) = setup(100);
        assert_eq!(
            cc.on_loss(&cfg, &mut round, Seq(0), Seq(100)),
            Verdict::Decreased
        );
        assert_eq!(cc.window_frames(), 50);
        assert!(cc.on_spurious_resend(&mut round));
        assert_eq!(cc.window_frames(), 100);
        // Nothing left to undo.
        assert!(!cc.on_spurious_resend(&mut round));
        // A delay decrease is a queue: never undone.
        let mut rt = |cc: &mut Congestion, us: u64, una: u32| {
            cc.on_round_trip(
                &cfg,
                &mut round,
                Duration::from_micros(us),
                1,
                Seq(una),
                Seq(300),
                Time::ZERO,
                128,
            )
        };
        // A round whose least sample is the base, then one all queued.
        rt(&mut cc, 50, 101);
        assert_eq!(rt(&mut cc, 500, 300), Verdict::Steady);
        assert_eq!(rt(&mut cc, 500, 300), Verdict::Decreased);
        let shrunk = cc.window_frames();
        assert!(!cc.on_spurious_resend(&mut round));
        assert_eq!(cc.window_frames(), shrunk);
    }

    #[test]
    fn an_old_loss_is_not_undone_rounds_later() {
        let (cfg, mut cc, mut round) = setup(100);
        cc.on_loss(&cfg, &mut round, Seq(0), Seq(100));
        let mut una = 0;
        for _ in 0..3 {
            // A whole round with no queue.
            let next = una + 100;
            cc.on_round_trip(
                &cfg,
                &mut round,
                50 * US,
                1,
                Seq(una),
                Seq(next),
                Time::ZERO,
                128,
            );
            una = next;
        }
        cc.on_round_trip(
            &cfg,
            &mut round,
            50 * US,
            1,
            Seq(una),
            Seq(una + 100),
            Time::ZERO,
            128,
        );
        assert!(!cc.on_spurious_resend(&mut round));
    }

    #[test]
    fn a_smaller_window_tolerates_more_queueing() {
        let cfg = always();
        let at = |frames: u32| {
            let cc = Congestion::new(
                &CongestionConfig {
                    initial_window: frames,
                    ..cfg
                },
                128,
            );
            cc.target_ns(&cfg, 128)
        };
        let target = cfg.target_delay.as_nanos() as u64;
        assert_eq!(at(128), target);
        assert_eq!(at(1), target + cfg.flow_scaling.as_nanos() as u64);
        assert!(at(2) > at(16) && at(16) > at(64) && at(64) > at(128));
    }

    #[test]
    fn a_loss_without_a_queue_is_not_congestion() {
        let (cfg, mut cc, mut round) = setup(100);
        let rt = |cc: &mut Congestion, round: &mut CongestionRound, us: u64, una: u32| {
            cc.on_round_trip(
                &cfg,
                round,
                Duration::from_micros(us),
                0,
                Seq(una),
                Seq(200),
                Time::ZERO,
                128,
            )
        };
        // Two rounds at the base (the acknowledgement delay aside): no queue.
        rt(&mut cc, &mut round, 50, 1);
        rt(&mut cc, &mut round, 70, 200);
        assert_eq!(
            cc.on_loss(&cfg, &mut round, Seq(150), Seq(250)),
            Verdict::Steady
        );
        assert_eq!(
            cc.on_timeout(&cfg, &mut round, 1, Seq(150), Seq(250)),
            Verdict::Steady
        );
        assert_eq!(
            cc.on_timeout(&cfg, &mut round, 2, Seq(150), Seq(250)),
            Verdict::Steady
        );
        assert_eq!(cc.window_frames(), 100);
        // A sample showed a queue: two timeouts in a row leave the smallest
        // window, in slow start up to half the window before.
        rt(&mut cc, &mut round, 120, 200);
        assert_eq!(
            cc.on_timeout(&cfg, &mut round, 2, Seq(150), Seq(250)),
            Verdict::Decreased
        );
        assert_eq!(cc.window_frames(), cfg.min_window);
        assert!(cc.in_slow_start());
        for una in 0..200 {
            cc.on_round_trip(
                &cfg,
                &mut round,
                50 * US,
                1,
                Seq(300 + una),
                Seq(600),
                Time::ZERO,
                128,
            );
        }
        assert!(!cc.in_slow_start());
        assert!(
            cc.window_frames() >= 50 && cc.window_frames() < 60,
            "{cc:?}"
        );
    }

    #[test]
    fn configuration_problems_name_the_field() {
        let bad = |f: fn(&mut CongestionConfig)| {
            let mut c = always();
            f(&mut c);
            c.problem(128).map(|(field, _)| field)
        };
        assert_eq!(bad(|_| {}), None);
        assert_eq!(bad(|c| c.min_window = 0), Some("congestion.min_window"));
        assert_eq!(
            bad(|c| c.initial_window = 1),
            Some("congestion.initial_window")
        );
        assert_eq!(
            bad(|c| c.max_decrease_permille = 1000),
            Some("congestion.max_decrease_permille")
        );
        assert_eq!(
            bad(|c| c.target_delay = Duration::ZERO),
            Some("congestion.target_delay")
        );
        assert_eq!(bad(|c| c.pacing_burst = 0), Some("congestion.pacing_burst"));
    }

    /// Auto mode: a dormant peer starts at the initial window, in slow
    /// start, and its samples keep the base and nothing else.
    fn dormant() -> (CongestionConfig, Congestion, CongestionRound) {
        let cfg = CongestionConfig {
            mode: CongestionMode::Auto,
            ..CongestionConfig::default()
        };
        (cfg, Congestion::new(&cfg, 128), CongestionRound::default())
    }

    #[test]
    fn a_dormant_window_grows_to_the_bound_whatever_the_delay_unpaced() {
        let (cfg, mut cc, mut round) = dormant();
        assert!(cc.is_dormant());
        assert_eq!(cc.limit_frames(128), 16);
        for (i, us) in [80u32, 50, 300, 900].into_iter().enumerate() {
            let v = cc.on_round_trip(
                &cfg,
                &mut round,
                us * US,
                16,
                Seq(16 * i as u32),
                Seq(128),
                Time::ZERO,
                128,
            );
            assert_eq!(v, Verdict::Steady);
        }
        assert!(cc.is_dormant(), "delay alone never wakes it");
        assert_eq!(cc.limit_frames(128), 16 + 4 * 16);
        let base = cc.base_rtt().unwrap();
        assert!(base <= 50 * US && base > 49 * US, "base {base:?}");
        assert_eq!(cc.pacing_rate(&cfg, Some(900 * US), 128), None);
        let mut sent = round;
        cc.on_sent(&cfg, &mut sent, Time::ZERO, Some(900 * US), 128);
        assert_eq!(cc.paced_until(&sent, Time::ZERO), None);
        // Acknowledgements without a sample grow it too, up to the bound.
        cc.grow_dormant(100, 128);
        assert_eq!(cc.limit_frames(128), 128);
        assert!(cc.is_dormant());
    }

    #[test]
    fn a_loss_wakes_a_dormant_peer_at_half_its_flight() {
        let (cfg, mut cc, mut round) = dormant();
        cc.grow_dormant(84, 128);
        assert_eq!(cc.limit_frames(128), 100);
        assert_eq!(
            cc.on_loss(&cfg, &mut round, Seq(10), Seq(110)),
            Verdict::Decreased
        );
        assert!(!cc.is_dormant());
        assert!(!cc.in_slow_start());
        assert_eq!(cc.limit_frames(128), 50);
        // No second decrease in the same round trip.
        assert_eq!(
            cc.on_loss(&cfg, &mut round, Seq(20), Seq(110)),
            Verdict::Steady
        );
        assert_eq!(cc.limit_frames(128), 50);
        // A timeout alone does not wake one (a round trip that outgrew it
        // behind other senders' windows, or a tail loss that its probe
        // will show as a loss).
        let (cfg, mut cc, mut round) = dormant();
        assert_eq!(
            cc.on_timeout(&cfg, &mut round, 1, Seq(0), Seq(16)),
            Verdict::Steady
        );
        assert!(cc.is_dormant());
        assert_eq!(cc.limit_frames(128), 16);
    }

    #[test]
    fn a_wake_whose_resends_arrived_is_undone_and_one_by_echo_is_not() {
        let (cfg, mut cc, mut round) = dormant();
        cc.grow_dormant(48, 128);
        assert_eq!(
            cc.on_loss(&cfg, &mut round, Seq(0), Seq(64)),
            Verdict::Decreased
        );
        assert_eq!(cc.limit_frames(128), 32);
        // Timeouts while the resends are under way keep the undo.
        cc.on_timeout(&cfg, &mut round, 2, Seq(0), Seq(64));
        assert_eq!(cc.limit_frames(128), cfg.min_window);
        // The resends were duplicates: dormant again, window as before.
        assert!(cc.on_spurious_resend(&mut round));
        assert!(cc.is_dormant());
        assert_eq!(cc.limit_frames(128), 64);
        // The peer reports frames missing on their way to it: we wake, and
        // duplicates of ours do not undo that.
        let (cfg, mut cc, mut round) = dormant();
        cc.grow_dormant(48, 128);
        assert_eq!(
            cc.on_congestion_echo(&cfg, &mut round, Seq(0), Seq(64)),
            Verdict::Decreased
        );
        assert_eq!(cc.limit_frames(128), 32);
        assert!(!cc.on_spurious_resend(&mut round));
        assert!(!cc.is_dormant());
        // Awake, an echo changes nothing.
        assert_eq!(
            cc.on_congestion_echo(&cfg, &mut round, Seq(0), Seq(64)),
            Verdict::Steady
        );
    }

    #[test]
    fn modes_parse_and_name_themselves() {
        for m in [
            CongestionMode::Off,
            CongestionMode::Auto,
            CongestionMode::On,
        ] {
            assert_eq!(CongestionMode::parse(m.name()), Some(m));
        }
        assert_eq!(CongestionMode::parse(" ON "), Some(CongestionMode::On));
        assert_eq!(CongestionMode::parse("0"), Some(CongestionMode::Off));
        assert_eq!(CongestionMode::parse("sometimes"), None);
        assert!(!CongestionConfig::default().controls());
        assert!(CongestionConfig {
            mode: CongestionMode::Auto,
            ..CongestionConfig::default()
        }
        .controls());
    }
}
