/*
 * The shared-memory inbox (drivers/shm/src/inbox.rs) with the sleeping and
 * waking of the mailbox that drives it (drivers/shm/src/mailbox.rs:
 * recv, release_head, prepare_wait, finish_wait, wake_space_waiters):
 * NP producers claim slots with one CAS on `tail`, write and publish them;
 * one consumer reads, releases and announces `released`; the ring wraps; a
 * full ring is back-pressure (the producer sleeps until space is
 * announced); an empty ring puts the consumer to sleep (the SLEEP bit in
 * `tail`, set by CAS, cleared by a producer's claim, which then rings).
 *
 * Each atomic step below is one memory operation of the code (a load, a
 * store, a CAS or a swap), so Spin explores every interleaving of them.
 * Spin's interleaving is sequentially consistent: the memory orderings
 * (acquire/release, the SeqCst fences) are the loom models' business
 * (drivers/shm/src/loom_models.rs); this model checks the algorithm.
 *
 * Properties:
 *   - every message is received exactly once, intact, in per-producer
 *     order (assertions on ghost counters);
 *   - a producer writes a slot only after its previous occupant was
 *     consumed, and the consumer reads only published slots (assertions);
 *   - no lost wake-up and no deadlock: every end state has every producer
 *     done and the consumer done (invalid end states: a consumer asleep
 *     with a message waiting, or a producer asleep on a full ring nobody
 *     will announce, is a process blocked outside an end state).
 */

#include "generated/shm_constants.h"

/* The instance: a valid geometry (a power of two, at least the minimum
 * the code accepts) and the code's announce batch for it (0 below 4 slots:
 * every consumed slot is announced at once). models/check.sh runs two:
 * the smallest inbox (wrap and full on every other message, 3 producers)
 * and 8 slots (batch 2: a full producer may wait on unannounced slots, so
 * the forced announcement before sleeping matters). */
#ifndef SLOTS
#define SLOTS INBOX_SLOTS_MIN
#endif
#define BATCH (ANNOUNCE_BATCH < SLOTS / 4 -> ANNOUNCE_BATCH : SLOTS / 4)
#ifndef NP
#define NP 3                      /* producers */
#endif
#ifndef K
#define K 1                       /* messages per producer */
#endif
#ifndef K0
#define K0 2                      /* messages of producer 0 */
#endif
#define MSGS(p) ((p) == 0 -> K0 : K)
#define TOTAL (K0 + (NP - 1) * K)

/* ---- Shared memory (InboxCtl, SlotHdr, directory entries) ------------ */

byte tail;                        /* claimed positions (tail & !SLEEP) */
bool sleep_bit;                   /* tail & SLEEP */
byte released;                    /* positions announced consumed */
bool full_waiters;                /* InboxCtl::full_waiters */
byte slot_seq[SLOTS];             /* SlotHdr::seq: pos + 1 once published */
byte slot_src[SLOTS];             /* payload: which producer */
byte slot_k[SLOTS];               /* payload: its message number */
bool waiting[NP];                 /* directory entry: waiting for space */

/* ---- Doorbells: a ring is remembered until the sleeper drains it ----- */

bool cbell;                       /* the consumer's */
bool pbell[NP];                   /* each producer's */

/* ---- Ghosts ---------------------------------------------------------- */

byte head;                        /* the consumer's private read index */
byte next_k[NP];                  /* next message number expected per producer */
byte received;                    /* messages received */

#define POS_FULL(p, r)  ((p) >= (r) + SLOTS)

proctype Producer(byte me) {
  byte k;                         /* message being sent */
  byte t; bool ts;                /* a loaded tail: position and SLEEP bit */
  byte cached;                    /* InboxProducer::released (private cache) */
  byte r, pos;
  bool wake;

  do
  :: k == MSGS(me) -> break
  :: else ->
     /* ---- claim_raw ---- */
     atomic { t = tail; ts = sleep_bit };                 /* tail.load */
claim:
     pos = t;
     if
     :: POS_FULL(pos, cached) ->
        atomic { r = released; cached = r };             /* released.load */
        if
        :: POS_FULL(pos, r) ->
           if
           :: tail == t && sleep_bit == ts ->            /* tail.load: unchanged */
              goto no_space
           :: atomic { !(tail == t && sleep_bit == ts) -> t = tail; ts = sleep_bit };
              goto claim
           fi
        :: else -> skip
        fi
     :: else -> skip
     fi;
     if                                                  /* tail CAS t -> pos + 1 */
     :: atomic { tail == t && sleep_bit == ts ->
                 tail = pos + 1; wake = sleep_bit; sleep_bit = false }
     :: atomic { !(tail == t && sleep_bit == ts) -> t = tail; ts = sleep_bit };
        goto claim
     fi;
     /* ---- write and publish ---- */
     /* The payload and header stores are invisible until `seq` is stored
      * (the consumer reads nothing else first): one step with it. */
     atomic {
       /* the slot's previous occupant was consumed */
       assert(pos < head + SLOTS);
       slot_src[pos % SLOTS] = me; slot_k[pos % SLOTS] = k;
       slot_seq[pos % SLOTS] = pos + 1                   /* seq.store (publish) */
     };
     if
     :: wake -> cbell = true                             /* ring the consumer */
     :: else -> skip
     fi;
     wake = false; k++;
     goto done_one;
no_space:
     /* ---- full: wait for space (Mailbox::prepare_wait, finish_wait) ---- */
     waiting[me] = true;                                 /* entry waiting flag */
     full_waiters = true;                                /* want_space (then a fence) */
     atomic { t = tail; ts = sleep_bit };                /* has_space: tail.load */
     atomic { r = released; cached = r };                /*            released.load */
     if
     :: POS_FULL(t, r) ->
        atomic { pbell[me] -> pbell[me] = false }        /* sleep until rung */
     :: else -> skip
     fi;
     waiting[me] = false;                                /* finish_wait */
     pbell[me] = false;                                  /* drain the doorbell */
done_one:
     t = 0; ts = false; r = 0; pos = 0
  od
}

/* Mailbox::wake_space_waiters: rings every producer whose waiting flag it
 * takes. */
inline wake_space_waiters() {
  i = 0;
  do
  :: i < NP ->
     if
     :: atomic { waiting[i] -> waiting[i] = false; pbell[i] = true }
     :: !waiting[i]
     fi;
     i++
  :: else -> break
  od;
  i = 0
}

/* InboxConsumer::announce(force), then the wake-up of space waiters. */
inline announce(force) {
  if
  :: unannounced == 0 || (!force && unannounced < BATCH) -> skip
  :: else ->
     unannounced = 0;
     released = head;                                    /* released.store, fence */
     if
     :: atomic { full_waiters -> full_waiters = false }; /* load, swap */
        wake_space_waiters()
     :: !full_waiters
     fi
  fi
}

proctype Consumer() {
  byte unannounced, i, s;
  bool armed;

  do
  :: received == TOTAL -> break
  :: else ->
     if
     /* ---- poll: seq == head + 1 (one acquire load) ---- */
     :: atomic { slot_seq[head % SLOTS] == head + 1 ->
          s = head % SLOTS;
          /* exactly once, intact, in per-producer order */
          assert(slot_src[s] < NP && slot_k[s] == next_k[slot_src[s]]);
          next_k[slot_src[s]]++;
          received++;
          head++;                                        /* release */
          unannounced++;
          s = 0 };
        announce(false)                                  /* release_head */
     :: slot_seq[head % SLOTS] != head + 1 ->
        /* ---- nothing ready: Mailbox::prepare_wait ---- */
        announce(true);
        /* arm_sleep: tail.load, then CAS head -> head | SLEEP (the first
         * branch is the code's early return when the bit is set already;
         * finish_wait always clears it, so the model never takes it) */
        if
        :: tail == head && sleep_bit -> armed = true
        :: tail == head && !sleep_bit ->
           if                                           /* CAS */
           :: atomic { tail == head && !sleep_bit -> sleep_bit = true; armed = true }
           :: !(tail == head && !sleep_bit)
           fi
        :: tail != head
        fi;
        if
        :: armed ->
           /* re-check the head (after bell::arm's fence), then sleep in
            * epoll until the doorbell is readable */
           if
           :: slot_seq[head % SLOTS] != head + 1 -> cbell
           :: slot_seq[head % SLOTS] == head + 1
           fi
        :: else -> skip
        fi;
        /* finish_wait: disarm (CAS head | SLEEP -> head), drain the bell */
        if
        :: atomic { tail == head && sleep_bit -> sleep_bit = false }
        :: !(tail == head && sleep_bit)
        fi;
        cbell = false;
        armed = false;
        /* A claim at the head not yet published: the code polls again
         * (prepare_wait keeps refusing to sleep, its announce has nothing
         * new); the model waits for the publication instead of spinning. */
        if
        :: tail != head -> slot_seq[head % SLOTS] == head + 1
        :: else -> skip
        fi
     fi
  od;
  assert(received == TOTAL && head == TOTAL)
}

init {
  byte p;
  assert(SLOTS >= INBOX_SLOTS_MIN && (SLOTS & (SLOTS - 1)) == 0);
  assert(TOTAL < 255);
  atomic {
    run Consumer();
    p = 0;
    do
    :: p < NP -> run Producer(p); p++
    :: else -> break
    od
  }
}
