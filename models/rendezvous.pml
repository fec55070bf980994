/*
 * The normal-channel rendezvous of bcl-core's port
 * (bcl-core/src/port/channels.rs: send_on_channel, start_channel_send,
 * post, cancel_post, on_request, on_ready, on_control_body,
 * on_transfer_data, adopt_announced, take_waiting_request,
 * accept_request): port A sends NS messages on one normal channel of port
 * B; B's application posts a buffer (of one of two sizes) before every
 * transfer, for anybody or for A only (then A is told at once:
 * RNDV_READY for transfer 0, which A keeps as a credit), and may take a
 * posted buffer back. A's sends on the channel take turns: each starts its
 * rendezvous (streaming on a large enough credit, else RNDV_REQUEST) when
 * the one before it has completed or failed.
 *
 * The wire is what the reliability protocol (models/reliability.pml) makes
 * of a lossy one: control messages (RNDV_REQUEST, RNDV_READY, CONTROL
 * Cancel) are delivered exactly once and in order per direction; transfer
 * data is delivered exactly once but in any order relative to them (data
 * frames are not in the ordered message stream: a lost control message
 * that is resent does not hold data back, and the other way round); the
 * acknowledgement of a data frame, which completes the transfer at the
 * sender, reaches A in any order relative to B's control messages. One
 * data frame stands for a transfer's frames.
 *
 * Properties:
 *   - exactly once: a send completes (SendDone) only if B received that
 *     message, once; a send that fails was not received;
 *   - in order: B receives the messages of the channel in the order A sent
 *     them (some may fail, none is overtaken);
 *   - no deadlock: every end state has every send completed or failed
 *     (invalid end states), with B's application posting a buffer whenever
 *     none is posted and A has sends outstanding (the receiver's side of
 *     the contract).
 *
 * -DOVERLAP models the port before sends took turns (every send started at
 * once): Spin finds a send that completes although B never got it (a
 * request overtakes a streamed transfer and takes its announced buffer).
 * -DNCANCEL=1 lets B take a posted buffer back once: Spin finds a send
 * that completes although B dropped its data, because the acknowledgement
 * of the dropped data can reach A before B's Cancel (see models/README.md;
 * not fixed, so models/check.sh runs without it).
 */

#include "generated/core_constants.h"

#ifndef NS
#define NS 3                      /* messages A sends on the channel */
#endif
#define SMALL 1                   /* bytes of a small posted buffer */
#define LARGE 2                   /* bytes of a large one */
#ifndef BIG
#define BIG 1                     /* the message that fits only a large buffer (NS: none) */
#endif
#ifndef NCANCEL
#define NCANCEL 0                 /* posts B's application may take back */
#endif
#define LEN(m) ((m) == BIG -> LARGE : SMALL)

#define NONE 255
#define ANY  0                    /* Posting::from: anybody */
#define ONLY_A 1                  /* Posting::from: A only */

/* ---- A: the sending port ---------------------------------------------- */

#define UNSENT    0               /* send_on_channel not called yet */
#define ASKED     1               /* RNDV_REQUEST sent, waiting for RNDV_READY */
#define STREAMING 2               /* data sent, waiting for its acknowledgement */
#define DONE      3               /* ChannelEvent::SendDone */
#define FAILED    4               /* ChannelEvent::SendFailed */
#define RESOLVED(m) (mstate[m] == DONE || mstate[m] == FAILED)
#define IN_OUT_TRANSFERS(m) (mstate[m] == ASKED || mstate[m] == STREAMING)

byte mstate[NS];
byte credit = NONE;               /* Port::credits for (B, channel) */
byte started;                     /* sends whose rendezvous has started */

/* ---- B: the receiving port -------------------------------------------- */

bool posted;                      /* NormalChannel::posted */
bit  pfrom;                       /* Posting::from (ANY or ONLY_A) */
byte pcap;                        /* the posted buffer's length */
byte writing;                      /* Posting::active: transfer id, 0 = none */
bool rx[NS];                      /* rx_transfers, by message */
chan waitq = [NS] of { byte, byte };  /* NormalChannel::waiting: transfer, length */
byte cancels;                     /* posts taken back */

/* ---- Ghosts ------------------------------------------------------------ */

byte rcvd[NS];                    /* ChannelEvent::Received, per message */
byte last_rcvd = NONE;            /* message of the latest Received */
byte too_large;                   /* ChannelEvent::ReceiveFailed TooLarge */

/* ---- The wire ---------------------------------------------------------- */

mtype = { REQ, READY, CANCEL };
chan a2b = [NS] of { mtype, byte, byte };              /* REQ transfer length */
chan b2a = [2 * NS + NCANCEL + 2] of { mtype, byte, byte, byte };
                                  /* READY transfer status capacity; CANCEL transfer */
bool data[NS];                    /* a transfer's data on its way to B */
bool acked[NS];                   /* its acknowledgement on its way to A */

/* Transfer ids: message m is transfer m + 1 (0 names an announcement). */
#define T(m)  ((m) + 1)
#define M(t)  ((t) - 1)

/* ---- A ----------------------------------------------------------------- */

/* A send completes: the acknowledgement of its last frame. */
inline send_done(m) {
  printf("TRACE rndv A SendDone %d\n", m);
  assert(rcvd[m] == 1);           /* exactly once: B has it */
  mstate[m] = DONE
}

inline send_failed(m) {
  printf("TRACE rndv A SendFailed %d\n", m);
  assert(rcvd[m] == 0);           /* a failed send was not received */
  mstate[m] = FAILED
}

/* send_on_channel for message m: stream at once on a large enough
 * credit, else ask. */
inline start_send(m) {
  if
  :: credit != NONE && credit >= LEN(m) ->
     credit = NONE;
     printf("TRACE rndv A stream %d\n", m);
     mstate[m] = STREAMING; data[m] = true
  :: else ->
     printf("TRACE rndv A request %d\n", m);
     a2b!REQ,T(m),LEN(m);
     mstate[m] = ASKED
  fi
}

proctype A() {
  byte t, st, cp, m;
  do
  :: (RESOLVED(0) && (NS < 2 || RESOLVED(1)) && (NS < 3 || RESOLVED(2))) -> break
  /* The application sends the next message; its rendezvous starts when
   * the one before it on the channel has ended. */
#ifdef OVERLAP
  :: d_step { started < NS -> start_send(started); started++ }
#else
  :: d_step { started < NS && (started == 0 || RESOLVED(started - 1)) ->
              start_send(started); started++ }
#endif
  /* RNDV_READY (on_ready) */
  :: d_step { b2a?[READY,_,_,_] -> b2a?READY,t,st,cp;
       if
       :: t == 0 -> if :: st == ST_OK -> credit = cp :: else -> skip fi
       :: else ->
          credit = NONE;          /* a buffer announced earlier went to this request */
          m = M(t);
          if
          :: IN_OUT_TRANSFERS(m) ->
             if
             :: st == ST_OK -> mstate[m] = STREAMING; data[m] = true
             :: else -> send_failed(m)
             fi
          :: else -> skip
          fi
       fi;
       t = 0; st = 0; cp = 0; m = 0 }
  /* CONTROL Cancel (on_control_body) */
  :: d_step { b2a?[CANCEL,_,_,_] -> b2a?CANCEL,t,_,_;
       credit = NONE;
       m = M(t);
       if
       :: IN_OUT_TRANSFERS(m) -> send_failed(m)
       :: else -> skip
       fi;
       t = 0; m = 0 }
  /* The acknowledgement of a transfer's data (frame_acknowledged). */
  :: d_step { acked[0] -> acked[0] = false; if :: mstate[0] == STREAMING -> send_done(0) :: else -> skip fi }
#if NS > 1
  :: d_step { acked[1] -> acked[1] = false; if :: mstate[1] == STREAMING -> send_done(1) :: else -> skip fi }
#endif
#if NS > 2
  :: d_step { acked[2] -> acked[2] = false; if :: mstate[2] == STREAMING -> send_done(2) :: else -> skip fi }
#endif
  od;
  /* Every message B received completed at A, and no other did. */
  m = 0;
  do
  :: m < NS -> assert((mstate[m] == DONE) == (rcvd[m] == 1)); m++
  :: else -> break
  od
}

/* ---- B ----------------------------------------------------------------- */

/* accept_request: the posted buffer goes to transfer t, or it is too
 * small (both sides learn it; the buffer stays posted). */
inline accept_request(t, ln) {
  if
  :: ln > pcap ->
     too_large++;
     b2a!READY,t,ST_TOO_SMALL,pcap;
     accepted = false
  :: else ->
     writing = t; rx[M(t)] = true;
     b2a!READY,t,ST_OK,pcap;
     accepted = true
  fi
}

/* The buffer is full: Received. */
inline finish_receive(m) {
  printf("TRACE rndv B Received %d\n", m);
  assert(rcvd[m] == 0);
  assert(last_rcvd == NONE || m > last_rcvd);   /* in order */
  rcvd[m]++; last_rcvd = m;
  rx[m] = false; posted = false; writing = 0; pfrom = ANY; pcap = 0
}

/* Transfer data of message m arrives (on_transfer_data). */
inline on_data(m) {
  acked[m] = true;                /* acknowledged whatever becomes of it */
  if
  :: rx[m] -> finish_receive(m)
  :: !rx[m] && posted && pfrom == ONLY_A && writing == 0 && pcap >= LEN(m) ->
     /* adopt_announced */
     writing = T(m); rx[m] = true; finish_receive(m)
  :: else ->
     printf("TRACE rndv B drop %d\n", m);
     b2a!CANCEL,T(m),ST_CANCELLED,0
  fi
}

proctype B() {
  byte t, ln;
  bool accepted;
end:
  do
  /* RNDV_REQUEST (on_request) */
  :: d_step { a2b?REQ,t,ln ->
       if
       :: posted && writing == 0 -> accept_request(t, ln)
       :: else -> waitq!t,ln
       fi;
       t = 0; ln = 0; accepted = false }
  /* Transfer data (on_transfer_data, adopt_announced) */
  :: d_step { data[0] -> data[0] = false; on_data(0) }
#if NS > 1
  :: d_step { data[1] -> data[1] = false; on_data(1) }
#endif
#if NS > 2
  :: d_step { data[2] -> data[2] = false; on_data(2) }
#endif
  /* The application posts a buffer (post): for anybody or for A. */
  :: atomic { !posted && !(RESOLVED(0) && (NS < 2 || RESOLVED(1)) && (NS < 3 || RESOLVED(2))) ->
       if
       :: pfrom = ANY
       :: pfrom = ONLY_A
       fi;
       if
       :: pcap = SMALL
       :: pcap = LARGE
       fi;
       d_step {
         printf("TRACE rndv B post %d %d\n", pfrom, pcap);
         posted = true; writing = 0;
         /* take_waiting_request */
         accepted = false;
         do
         :: nempty(waitq) && !accepted -> waitq?t,ln; accept_request(t, ln)
         :: empty(waitq) || accepted -> break
         od;
         if
         :: !accepted && pfrom == ONLY_A -> b2a!READY,0,ST_OK,pcap
         :: else -> skip
         fi;
         t = 0; ln = 0; accepted = false
       } }
  /* The application takes its buffer back (cancel_post). */
  :: d_step { posted && cancels < NCANCEL ->
       printf("TRACE rndv B cancel_post\n");
       cancels++;
       if
       :: writing != 0 -> rx[M(writing)] = false; b2a!CANCEL,writing,ST_CANCELLED,0
       :: else -> skip
       fi;
       posted = false; writing = 0; pfrom = ANY; pcap = 0 }
  od;
}

init {
  assert(NS >= 1 && NS <= 3);
  atomic { run A(); run B() }
}
