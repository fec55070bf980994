/*
 * The reliability protocol of bcl-core's port (bcl-core/src/port/send.rs,
 * recv.rs, timer.rs, peer.rs; bcl-core/src/seq.rs, sack.rs): one sender
 * port A and one receiver port B over a wire that loses, duplicates and
 * reorders frames. See models/README.md for what is modelled, what is
 * abstracted away, the bounds and the results.
 *
 * Properties:
 *   - safety (assertions): B delivers messages exactly once and in order;
 *     A completes a message only after B delivered it; sequence numbers
 *     compare correctly across the wrap (asserted in the handlers);
 *   - no deadlock: every end state has every message delivered and
 *     acknowledged (invalid end states);
 *   - no livelock: every execution completes (ltl `completes`, checked with
 *     pan -a; the faults are bounded, so the adversary cannot lose forever).
 *
 * Every event that crosses the wire, every timer and every delivery and
 * completion prints a TRACE line: models/traces.sh turns Spin's output
 * (random simulations, and trails of witness runs: -DWITNESS=bits asserts
 * that no complete execution shows the events in the `seen` bits, so pan's
 * counterexample is one that does) into the traces that
 * bcl-core/tests/trace_replay.rs replays on the Rust ports. -DREPLAY
 * leaves out the one choice the replay cannot reproduce: a frame sent
 * before one that was delivered, whose reordering window has not passed
 * yet (the model does not track time), is judged lost later, by the
 * reorder timer; with -DREPLAY it is judged lost at once, and the replay
 * runs the code's reorder timer to the same effect.
 */

#include "generated/core_constants.h"

/* ---- The small instance (derived from the code's constants) ---------- */

/* The code's windows divided by SCALE keep their ratio: the sender's window
 * is half the receiver's, as TX_WINDOW (128) is half RX_WINDOW (256). */
#ifndef SCALE
#define SCALE 64
#endif
#define W     (TX_WINDOW / SCALE)      /* frames in flight: 2 */
#define RXW   (RX_WINDOW / SCALE)      /* receiver window = SACK bits: 4 */
#define SBITS (SACK_BITS / SCALE)      /* frames past the ACK one ACK describes */

/* Sequence numbers modulo SEQM (the code's are modulo 2^32), starting two
 * before the wrap (like the code's tests with initial_seq near u32::MAX).
 * Serial arithmetic is correct while every number compared lies within
 * SEQM/2 of every other: NMSG + W <= SEQM/2 keeps it so (asserted in init). */
#ifndef SEQM
#define SEQM  16
#endif
#ifndef NMSG
#define NMSG  4                        /* messages, one frame each */
#endif
#define ISEQ  (SEQM - 2)               /* first sequence number */

/* The wire: at most CAP frames in flight per direction, and the adversary's
 * budget of faults (a bound, so every execution can complete). */
#ifndef CAP
#define CAP   3
#endif
#ifndef LOSS_MAX
#define LOSS_MAX 2                     /* frames lost (either direction) */
#endif
#ifndef DUP_MAX
#define DUP_MAX 1                      /* frames duplicated */
#endif
#ifndef EARLY_MAX
#define EARLY_MAX 1                    /* timeouts while frames still travel */
#endif

/* The receive ring (recv.rs alloc_rx_slot): RING messages; a message ahead
 * of a gap needs one slot of headroom left (an eager message is one slot
 * here); the next one in order may renege the others. */
#ifndef RING
#define RING  2
#endif

/* ---- Serial-number arithmetic (seq.rs) ------------------------------- */

#define DIFF(a,b)    ((((a) + SEQM) - (b)) % SEQM)   /* (a - b) mod SEQM */
#define BEFORE(a,b)  (DIFF(a,b) >= SEQM / 2)         /* Seq::before */
#define NEXT(s)      (((s) + 1) % SEQM)
#define PREV(s)      (((s) + SEQM - 1) % SEQM)
#define ABS(s)       DIFF(s, ISEQ)                   /* message index of seq s */
#define BIT(m,i)     (((m) >> (i)) & 1)

#define NONE 255

/* ---- Sender state (Peer, TxWindow) ----------------------------------- */

byte una = ISEQ;          /* oldest unacknowledged */
byte nxt = ISEQ;          /* next sequence number to assign */
unsigned sacked : SEQM;   /* TxSlot::sacked, indexed by sequence number */
unsigned lost : SEQM;     /* TxSlot::lost: judged lost by time and sequence */
unsigned evid : SEQM;     /* a frame sent after this one's last sending was
                           * delivered (loss.rs: sent before the RACK mark) */
byte ord[W];              /* frames in flight in the order of their last
                           * sending (TxSlot::sent_order), NONE = free */
byte retx_from = ISEQ;    /* the retransmission sweep [retx_from, retx_to) */
byte retx_to = ISEQ;
bool retx_all;            /* resend regardless of age */
bool probe_newest;        /* a timeout asked to resend the newest frame */
bool busy;                /* ring-full back-off running (busy_until > now) */
byte ctimeouts;           /* consecutive timeouts, saturating */
byte completed;           /* ghost: messages completed at A, in order */

/* Ghost: what an execution has shown, for witness runs (-DWITNESS). */
#define SEEN_RENEGE     1         /* the receiver dropped held messages */
#define SEEN_RING_FULL  2         /* a ring-full NAK made the sender back off */
#define SEEN_FULL_RESEND 4        /* a timeout resent the whole window */
#define SEEN_GAP_RETX   8         /* a frame judged lost was resent */
#define SEEN_EARLY_RTO  16        /* a timeout fired while frames travelled */
#define SEEN_DUP_DATA   32        /* a duplicated DATA frame arrived */
#define SEEN_DUP_ACK    64        /* a duplicated ACK or NAK arrived */
#ifdef WITNESS
byte seen;
#define SEE(bits)  seen = seen | (bits)
#else
#define SEE(bits)  skip                   /* no ghost state outside witness runs */
#endif

/* ---- Receiver state (Peer, RxWindow, SystemRing) --------------------- */

byte expected = ISEQ;     /* next sequence number wanted */
byte rbits;               /* bitmap: bit i = frame expected+i held */
byte held[RXW];           /* message id carried by the frame held at offset i */
bool ack_now;             /* an ACK should go out now */
bool ack_armed;           /* the delayed-ACK timer runs */
byte nak = NAK_NONE;      /* NAK to send */
byte ring_used;           /* ring slots holding messages (held or delivered) */
byte undelivered;         /* of which held for undelivered messages */
bool reserved;            /* ring reserved for the next message in order */
byte delivered;           /* ghost: messages delivered to B's application */
byte released;            /* ghost: delivered messages B's application released */

/* ---- The wire: two bags of frames, kept sorted (a canonical multiset) - */

byte dseq[CAP];           /* A -> B: DATA frames (sequence number), NONE = free */
byte dmsg[CAP];           /* ... and the message id they carry */
byte aack[CAP];           /* B -> A: ACK/NAK frames (cumulative ack), NONE = free */
byte abits[CAP];          /* ... selective bitmap relative to the ack */
byte areason[CAP];        /* ... NAK reason */
byte ndata, nacks;        /* frames in each bag */
byte losses, dups, early; /* faults spent */

/* For the trace: print a sequence number as its message index (absolute). */
#define TR_SEND_D(s,re)  printf("TRACE send D %d %d\n", ABS(s), re)
#define TR_SEND_A(a,b,r) printf("TRACE send A %d %d %d\n", ABS(a), b, r)

/* Puts a DATA frame on the wire (the bag is sorted by insertion). */
inline put_data(s, m) {
  assert(ndata < CAP);
    i = CAP - 1;
  do
  :: i > 0 && (dseq[i-1] == NONE || dseq[i-1] > s) ->
       dseq[i] = dseq[i-1]; dmsg[i] = dmsg[i-1]; i--
  :: else -> break
  od;
  /* every free slot is at the end: shift down into it */
  dseq[i] = s; dmsg[i] = m; ndata++;
  i = 0
}

inline take_data(k) {
    i = k;
  do
  :: i < CAP - 1 -> dseq[i] = dseq[i+1]; dmsg[i] = dmsg[i+1]; i++
  :: else -> break
  od;
  dseq[CAP-1] = NONE; dmsg[CAP-1] = 0; ndata--;
  i = 0
}

inline put_ack(a, b, r) {
  assert(nacks < CAP);
    i = CAP - 1;
  do
  :: i > 0 && (aack[i-1] == NONE || aack[i-1] > a ||
               (aack[i-1] == a && (abits[i-1] > b ||
                                   (abits[i-1] == b && areason[i-1] > r)))) ->
       aack[i] = aack[i-1]; abits[i] = abits[i-1]; areason[i] = areason[i-1]; i--
  :: else -> break
  od;
  aack[i] = a; abits[i] = b; areason[i] = r; nacks++;
  i = 0
}

inline take_ack(k) {
    i = k;
  do
  :: i < CAP - 1 ->
       aack[i] = aack[i+1]; abits[i] = abits[i+1]; areason[i] = areason[i+1]; i++
  :: else -> break
  od;
  aack[CAP-1] = NONE; abits[CAP-1] = 0; areason[CAP-1] = 0; nacks--;
  i = 0
}

/* ---- Sender ---------------------------------------------------------- */

#define RETX_PENDING  BEFORE(retx_from, retx_to)
#define IN_FLIGHT     DIFF(nxt, una)
#define CAN_NEW       (IN_FLIGHT < W && ABS(nxt) < NMSG)

/* Peer::add_retx_range */
inline add_retx(from, to, all) {
  f = from;
  if
  :: BEFORE(f, una) -> f = una
  :: else -> skip
  fi;
  if
  :: !BEFORE(f, to) -> skip
  :: else ->
     if
     :: RETX_PENDING ->
        if
        :: BEFORE(f, retx_from) -> retx_from = f
        :: else -> skip
        fi;
        if
        :: BEFORE(retx_to, to) -> retx_to = to
        :: else -> skip
        fi;
        retx_all = retx_all || all
     :: else -> retx_from = f; retx_to = to; retx_all = all
     fi
  fi;
  f = 0
}

/* Frame x leaves (first sending or resend): it moves to the end of the
 * sending order, and nothing sent after it has been delivered yet. */
inline order_sent(x) {
  i = 0;
  do
  :: i < W && ord[i] != x && ord[i] != NONE -> i++
  :: else -> break
  od;
  if
  :: i < W && ord[i] == x ->
     do
     :: i < W - 1 && ord[i+1] != NONE -> ord[i] = ord[i+1]; i++
     :: else -> break
     od;
     ord[i] = NONE
  :: else -> skip
  fi;
  i = 0;
  do
  :: i < W && ord[i] != NONE -> i++
  :: else -> break
  od;
  assert(i < W);
  ord[i] = x;
  i = 0;
  evid = evid & ~(1 << x);
  lost = lost & ~(1 << x)
}

/* loss::note_delivered: frame y is newly known delivered, so every frame
 * whose last sending came before y's is sent before the mark. */
inline note_delivered(y) {
  i = 0;
  do
  :: i < W && ord[i] != NONE && ord[i] != y -> evid = evid | (1 << ord[i]); i++
  :: else -> break
  od;
  assert(i < W && ord[i] == y);
  i = 0
}

#define LOSS_DUE(x)  (BIT(evid, x) && !BIT(sacked, x) && !BIT(lost, x))

/* Port::detect_losses after an ACK or NAK: a frame sent before the mark is
 * judged lost once its reordering window has passed, which may be now or
 * later (the reorder timer); -DREPLAY: now. */
inline detect_losses() {
  s = una;
  do
  :: s != nxt ->
     if
     :: LOSS_DUE(s) -> lost = lost | (1 << s); add_retx(s, NEXT(s), false)
#ifndef REPLAY
     :: LOSS_DUE(s) -> skip
#endif
     :: !LOSS_DUE(s) -> skip
     fi;
     s = NEXT(s)
  :: else -> break
  od;
  s = 0
}

/* The reorder timer fires: the frames still waiting are judged lost. */
inline reorder_timer() {
  s = una;
  do
  :: s != nxt ->
     if
     :: LOSS_DUE(s) -> lost = lost | (1 << s); add_retx(s, NEXT(s), false)
     :: else -> skip
     fi;
     s = NEXT(s)
  :: else -> break
  od;
  s = 0
}

/* A sweep that is over keeps stale bounds in the code; every later use
 * overwrites them (add_retx_range) or ignores them, so the model resets
 * them to keep equivalent states one state. */
inline canon_retx() {
  if
  :: !RETX_PENDING -> retx_from = una; retx_to = una; retx_all = false
  :: else -> skip
  fi
}

/* emit_retransmission: resends the next frame of the sweep that needs it:
 * any frame not selectively acknowledged (retx_all: a timeout, a full
 * ring), or only those judged lost. */
inline emit_retx() {
  do
  :: !RETX_PENDING -> break
  :: else ->
     s = retx_from;
     retx_from = NEXT(retx_from);
     if
     :: BEFORE(s, una) || !BEFORE(s, nxt) -> skip
     :: else ->
        if
        :: BIT(sacked, s) -> skip
        :: else ->
           if
           :: retx_all -> sent = true
           :: !retx_all && BIT(lost, s) -> sent = true
           :: !retx_all && !BIT(lost, s) -> skip
           fi;
           if
           :: sent ->
              if
              :: !retx_all -> SEE(SEEN_GAP_RETX)
              :: else -> skip
              fi;
              TR_SEND_D(s, 1); put_data(s, ABS(s)); order_sent(s); break
           :: else -> skip
           fi
        fi
     fi
  od;
  s = 0
}

/* Port::emit for the sender's side: a probe, else a retransmission, else
 * new data. */
inline emit() {
  sent = false;
  if
  :: probe_newest ->
     probe_newest = false;
     if
     :: una != nxt ->
        sf = retx_from; st = retx_to; sa = retx_all;
        retx_from = PREV(nxt); retx_to = nxt; retx_all = true;
        emit_retx();
        retx_from = sf; retx_to = st; retx_all = sa;
        sf = 0; st = 0; sa = false
     :: else -> skip
     fi
  :: else -> skip
  fi;
  if
  :: !sent && RETX_PENDING -> emit_retx()
  :: else -> skip
  fi;
  if
  :: !sent && CAN_NEW ->
     sacked = sacked & ~(1 << nxt);     /* a fresh TxSlot */
     TR_SEND_D(nxt, 0);
     put_data(nxt, ABS(nxt));
     order_sent(nxt);
     nxt = NEXT(nxt)
  :: else -> skip
  fi;
  canon_retx()
}

/* Forgets selective-ack flags outside [una, nxt): the code overwrites a
 * slot when it is reused; clearing them here keeps the state canonical. */
inline canon_sacked() {
    s = 0;
  do
  :: s < SEQM ->
     if
     :: BEFORE(s, una) || !BEFORE(s, nxt) ->
        sacked = sacked & ~(1 << s); lost = lost & ~(1 << s); evid = evid & ~(1 << s)
     :: else -> skip
     fi;
     s++
  :: else -> break
  od;
  /* frames acknowledged leave the sending order */
  s = 0; i = 0;
  do
  :: i < W ->
     if
     :: ord[i] != NONE && !BEFORE(ord[i], una) -> ord[s] = ord[i]; s++
     :: else -> skip
     fi;
     i++
  :: else -> break
  od;
  do
  :: s < W -> ord[s] = NONE; s++
  :: else -> break
  od;
  s = 0; i = 0
}

/* Port::handle_frame for an ACK or NAK at A: on_cumulative_ack, then
 * on_ack_body if the acknowledgement is valid. */
inline on_ack(a, b, r) {
  valid = true;
  if
  :: BEFORE(a, una) -> skip                     /* late: nothing new */
  :: !BEFORE(a, una) && DIFF(a, una) > IN_FLIGHT ->
     valid = false                              /* acknowledges unsent frames */
  :: !BEFORE(a, una) && DIFF(a, una) <= IN_FLIGHT && a != una ->
     /* Every message whose frame this covers completes: B must have
      * delivered it. */
     do
     :: una != a ->
        if
        :: !BIT(sacked, una) -> note_delivered(una)
        :: else -> skip
        fi;
        assert(ABS(una) == completed);
        assert(completed < delivered);
        printf("TRACE A completes %d\n", completed);
        completed++;
        una = NEXT(una)
     :: else -> break
     od;
     ctimeouts = 0;
     if
     :: BEFORE(retx_from, a) -> retx_from = a
     :: else -> skip
     fi;
     canon_sacked()
  :: else -> skip                               /* a == una */
  fi;
  if
  :: valid ->
     /* The frame at the ack is missing at B by definition. */
     if
     :: !BEFORE(a, una) && DIFF(a, una) < IN_FLIGHT -> sacked = sacked & ~(1 << a)
     :: else -> skip
     fi;
     hi = NONE;
     s = NEXT(a);
     do
     :: BEFORE(s, nxt) && DIFF(s, a) <= SBITS ->
        if
        :: !BEFORE(s, una) ->
           if
           :: BIT(b, DIFF(s, a)) ->
              if
              :: !BIT(sacked, s) -> note_delivered(s)
              :: else -> skip
              fi;
              sacked = sacked | (1 << s); hi = s
           :: else -> sacked = sacked & ~(1 << s)
           fi
        :: else -> skip
        fi;
        s = NEXT(s)
     :: else -> break
     od;
     s = 0;
     if
     :: r != NAK_RING_FULL && una != nxt -> detect_losses()
     :: r == NAK_RING_FULL ->
        ctimeouts = 0;
        busy = true;                            /* back off (if not already) */
        SEE(SEEN_RING_FULL);
        add_retx(a, nxt, true)
     :: else -> skip
     fi;
     hi = 0
  :: else -> skip
  fi;
  canon_retx();
  valid = false
}

/* on_retransmission_timeout */
inline on_rto() {
  if
  :: ctimeouts < FULL_RESEND_AFTER_TIMEOUTS -> ctimeouts++
  :: else -> skip
  fi;
  sacked = 0;                                   /* SACKs are not trusted */
  evid = 0;                                     /* nor the mark */
  if
  :: ctimeouts >= FULL_RESEND_AFTER_TIMEOUTS ->
     SEE(SEEN_FULL_RESEND);
     add_retx(una, nxt, true)
  :: else ->
     lost = lost | (1 << una);                  /* resent as if judged lost */
     add_retx(una, NEXT(una), false);
     probe_newest = (PREV(nxt) != una)
  fi
}

proctype Sender() {
  byte i, s, f, sf, st, hi;
  bool sent, sa, valid;
  do
  :: atomic { !busy && (RETX_PENDING || probe_newest || CAN_NEW) && ndata < CAP ->
              emit() }
  :: d_step { busy -> printf("TRACE backoff\n"); busy = false }
  :: d_step { una != nxt && !busy && early < EARLY_MAX && (ndata + nacks > 0) ->
              early++; SEE(SEEN_EARLY_RTO);
              printf("TRACE timeout\n"); on_rto() }
  :: atomic { timeout && una != nxt && !busy -> d_step { printf("TRACE timeout\n"); on_rto() } }
#ifndef REPLAY
  :: d_step { (evid & ~sacked & ~lost) != 0 -> reorder_timer() }
#endif
  :: atomic { una == nxt && ABS(nxt) == NMSG -> break }
  od;
  assert(completed == NMSG && delivered == NMSG);
#ifdef WITNESS
  /* A witness run: this "fails" on an execution that shows them all. */
  assert((seen & (WITNESS)) != (WITNESS))
#endif
}

/* ---- Receiver -------------------------------------------------------- */

/* Peer::answer_duplicate */
inline answer_dup() {
  if
  :: rbits != 0 && nak == NAK_NONE -> nak = NAK_GAP
  :: else -> skip
  fi;
  ack_now = true
}

/* renege_all: drops every held message not next in order; their frames
 * are forgotten (the sender resends them) and an ACK goes out. */
inline renege() {
  j = 1;
  do
  :: j < RXW ->
     if
     :: BIT(rbits, j) ->
        rbits = rbits & ~(1 << j); held[j] = 0;
        ring_used--; undelivered--; reneged = true
     :: else -> skip
     fi;
     j++
  :: else -> break
  od;
  j = 0;
  if
  :: reneged -> ack_now = true; reneged = false; SEE(SEEN_RENEGE)
  :: else -> skip
  fi
}

/* alloc_rx_slot for the message of offset `off` (next in order iff off is
 * 0): ahead of a gap it needs a full message of headroom; next in order it
 * may renege the others, and reserves the ring if it still does not fit. */
inline alloc_slot(off) {
  got = false;
  if
  :: off > 0 ->
     if
     :: !reserved && RING - ring_used >= 2 -> got = true
     :: else -> skip
     fi
  :: else ->
     if
     :: ring_used == RING -> renege()
     :: else -> skip
     fi;
     if
     :: ring_used < RING -> got = true; reserved = false
     :: else -> reserved = true
     fi
  fi;
  if
  :: got -> ring_used++; undelivered++
  :: else -> skip
  fi
}

/* on_sequenced for a DATA frame (one frame per message), then deliver. */
inline on_data(sq, m) {
  if
  :: BEFORE(sq, expected) -> answer_dup()      /* already received */
  :: else ->
     off = DIFF(sq, expected);
     if
     :: off >= RXW -> skip                      /* out of window */
     :: off < RXW && BIT(rbits, off) -> answer_dup()
     :: off < RXW && !BIT(rbits, off) ->
        alloc_slot(off);
        if
        :: !got ->                              /* refuse_ring_full */
           if
           :: nak == NAK_NONE || nak == NAK_GAP -> nak = NAK_RING_FULL
           :: else -> skip
           fi
        :: got ->
           assert(m == ABS(sq));                /* the right frame */
           /* it skipped over frames not missing before it came */
           newgap = (off > 0 && (rbits >> (off - 1)) == 0);
           held[off] = m;
           rbits = rbits | (1 << off);
           if
           :: off == 0 ->
              /* advance over the leading run, delivering in order */
              do
              :: BIT(rbits, 0) ->
                 assert(held[0] == delivered);  /* exactly once, in order */
                 printf("TRACE B delivers %d\n", delivered);
                 delivered++; undelivered--;
                 j = 0;
                 do
                 :: j < RXW - 1 -> held[j] = held[j+1]; j++
                 :: else -> break
                 od;
                 held[RXW-1] = 0; j = 0;
                 rbits = rbits >> 1;
                 expected = NEXT(expected)
              :: else -> break
              od;
              ack_armed = true
           :: off > 0 && newgap ->
              if
              :: nak == NAK_NONE -> nak = NAK_GAP
              :: else -> skip
              fi
           :: off > 0 && !newgap -> ack_armed = true   /* a hole filled, a run grew */
           fi
        fi
     fi
  fi;
  off = 0; got = false; newgap = false
}

proctype Receiver() {
  byte i;
end:
  do
  /* An ACK or NAK is due now, or the delayed-ACK timer fires (at any
   * moment: the model has no clock) and the ACK goes out. */
  :: d_step { (ack_now || ack_armed || nak != NAK_NONE) && nacks < CAP ->
              TR_SEND_A(expected, rbits, nak);
              put_ack(expected, rbits, nak);
              nak = NAK_NONE; ack_now = false; ack_armed = false }
  od
}

/* B's application: releases delivered messages' ring blocks, eventually
 * (a process of its own, so that weak fairness says "eventually"). */
proctype App() {
end:
  do
  :: d_step { released < delivered -> printf("TRACE release\n"); released++; ring_used-- }
  od
}

/* ---- The wire -------------------------------------------------------- */

proctype Wire() {
  byte i, k, j, off, s, f, hi, sq, m;
  bool got, reneged, valid, newgap;
end:
  do
  :: atomic { ndata > 0 ->
       select(k : 0 .. ndata - 1);
       sq = dseq[k]; m = dmsg[k];
       if
       :: d_step { printf("TRACE deliver D %d\n", ABS(sq)); take_data(k); on_data(sq, m) }
       :: losses < LOSS_MAX ->
          d_step { printf("TRACE drop D %d\n", ABS(sq)); losses++; take_data(k) }
       :: dups < DUP_MAX ->
          d_step { printf("TRACE dup D %d\n", ABS(sq)); dups++; SEE(SEEN_DUP_DATA);
                   on_data(sq, m) }
       fi;
       k = 0; sq = 0; m = 0 }
  :: atomic { nacks > 0 ->
       select(k : 0 .. nacks - 1);
       sq = aack[k]; m = abits[k]; j = areason[k];
       if
       :: d_step { printf("TRACE deliver A %d %d %d\n", ABS(sq), m, j); take_ack(k); on_ack(sq, m, j) }
       :: losses < LOSS_MAX ->
          d_step { printf("TRACE drop A %d %d %d\n", ABS(sq), m, j); losses++; take_ack(k) }
       :: dups < DUP_MAX ->
          d_step { printf("TRACE dup A %d %d %d\n", ABS(sq), m, j); dups++; SEE(SEEN_DUP_ACK);
                   on_ack(sq, m, j) }
       fi;
       k = 0; sq = 0; m = 0; j = 0 }
  od
}

/* Every execution delivers and acknowledges everything. */
ltl completes { <> (completed == NMSG) }

init {
  byte i;
  assert(W >= 1 && W <= RXW && SBITS == RXW);   /* tx_window <= RX_WINDOW == SACK_BITS */
  assert(NMSG + W <= SEQM / 2);                 /* serial arithmetic stays correct */
  assert(RING >= 2);                            /* one message plus headroom */
  /* The instance, for the replay (which checks the code's constants). */
  printf("TRACE param NMSG %d\n", NMSG);
  printf("TRACE param SCALE %d\n", SCALE);
  printf("TRACE param W %d\n", W);
  printf("TRACE param RXW %d\n", RXW);
  printf("TRACE param RING %d\n", RING);
  printf("TRACE param SEQM %d\n", SEQM);
  printf("TRACE param ISEQ %d\n", ISEQ);
  printf("TRACE param TX_WINDOW %d\n", TX_WINDOW);
  printf("TRACE param RX_WINDOW %d\n", RX_WINDOW);
  printf("TRACE param SACK_BITS %d\n", SACK_BITS);
  printf("TRACE param FULL_RESEND_AFTER_TIMEOUTS %d\n", FULL_RESEND_AFTER_TIMEOUTS);
  printf("TRACE param NAK_GAP %d\n", NAK_GAP);
  printf("TRACE param NAK_RING_FULL %d\n", NAK_RING_FULL);
  d_step {
    i = 0;
    do
    :: i < CAP -> dseq[i] = NONE; aack[i] = NONE; i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < W -> ord[i] = NONE; i++
    :: else -> break
    od;
    i = 0
  };
  atomic {
    run Sender(); run Receiver(); run Wire(); run App()
  }
}
