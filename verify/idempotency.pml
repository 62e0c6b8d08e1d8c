/*
 * The idempotency protocol of pkg/idempotency, for the spin model checker.
 *
 * One key (one user, one Idempotency-Key) and several invocations of it,
 * each running the engine's flow (core.go, heartbeat.go, cache.go) against
 * one store record that keeps the Store contract (store.go; pgstore's
 * idempotency_key_claim and its fenced siblings):
 *
 *   claim   insert the record in progress with a lease, or take over one
 *           whose lease has run out by the earlier of the caller's clock and
 *           the store's, or answer with the live record. The same owner
 *           repeating its claim for the same fingerprint is claimed again.
 *   run     only when this invocation holds the claim.
 *   finish  complete (store the response) or release (delete the record),
 *           each fenced by the owner token and the in-progress status,
 *           retried after a failure; a retry whose first attempt committed
 *           is answered lease-lost.
 *   renew   a heartbeat run's lease, fenced like complete. A heartbeat run
 *           is told (its context cancelled) when no renewal has succeeded
 *           by its last grant + H - LM on its monotonic clock (see "Time");
 *           its handler then stops, as it does when a renewal hears the
 *           lease lost.
 *
 * Faults, all explored exhaustively: every call's request may be lost
 * before the store acts, or its reply lost after the store acted (the
 * store may act after the caller has died); an invocation may crash at any
 * step; a run with a deadline is killed when the deadline passes; every
 * clock reading drifts within the bound (see "Time").
 *
 * Time. T is true time, advanced by one process in ticks. A clock that keeps
 * the bound reads T + d with d in -B..B (stored with the offset OFF so that
 * values stay unsigned). A clock may also run ahead without bound (it reads
 * T + WILD): at a takeover, at most one of the two clocks judged (the
 * taker's and the store's) does that. A lease is the caller's clock at the
 * claim plus the time left to its deadline plus the margin M (leaseUntil,
 * context.go), or the caller's clock plus the heartbeat H for a run with no
 * deadline. The lease rule is M >= 2B: two good clocks differ by at most 2B.
 *
 * A heartbeat run's local deadline. The engine holds a lease, locally, for
 * H - LM from its grant (LM = min(M, H/3)): the send of the claim, then the
 * send of each renewal that succeeded, never its reply, which may come
 * late; a renewal that fails moves nothing. It measures that on the
 * monotonic clock, which does not read the time of day but measures
 * elapsed time, whatever the caller's clock (the lease's) reads; its rate
 * error over one lease is far below the bound, so the model counts it in
 * true time: the handler is stopped by T = grant + H - LM (it may stop at
 * any time before), while the lease the store holds is the caller's clock
 * at a send (at least grant - B) plus H. Takeover needs the earlier of two
 * clocks, one of them good, past that lease, so comes at T >= grant + H -
 * 2B: LM >= 2B, that is M >= 2B and H >= 6B, keeps the two apart. (A local
 * deadline judged on a clock that only keeps the bound, reading by reading,
 * would need LM >= 4B: the grant read B ahead, the deadline B behind.)
 *
 * Properties (each a numbered violation below; docs/reliability.md states
 * them in prose):
 *   P1 no two runs of the key overlap while a lease is live: when a run
 *      starts, every other run still going lost its lease by the store's
 *      clock before this run's claim.
 *   P2 a completed record is never changed and never released.
 *   P3 every replay (from the store or from the local cache) returns the
 *      first completed response.
 *   P4 a call never changes a record it does not own: complete, release and
 *      renew write only the caller's own record in progress.
 *   P5 a run with a deadline is never overlapped: a second run of the key
 *      starts only after the first was released, or after its lease ran
 *      out, which the lease rule puts after its deadline, when it is dead.
 *      Only a run without a deadline (a heartbeat run whose renewals failed
 *      for a whole lease) can still be claimed when its key is taken over;
 *      P6 says its handler has stopped by then.
 *   P6 at most one run of the key executes at any time: when a run's
 *      handler starts, no other run's handler is still executing, heartbeat
 *      runs included, whatever renewal requests or replies are lost. It
 *      rests on the local deadline of heartbeat runs and on handlers that
 *      stop when told (a deadline run is stopped by its deadline). P6 makes
 *      P1 strong: P1 lets a heartbeat run whose renewals failed for a whole
 *      lease go on beside the run that took its key over; P6 says it has
 *      stopped by then. P1 stays as the store's half: when it may hand the
 *      key over.
 *
 * Mutations (each removes one rule; make verify expects the named property
 * to fail): M_TAKER_CLOCK, M_STORE_CLOCK (P1); M_NO_MARGIN, M_FIXED_LEASE
 * (P5); M_TAKEOVER_COMPLETED, M_RELEASE_ANY_STATUS (P2); M_CACHE_ANY_FINISH
 * (P3); M_RELEASE_ANY_OWNER, M_COMPLETE_ANY_OWNER, M_RENEW_ANY_OWNER (P4);
 * M_NO_LOCAL_CANCEL (a heartbeat run is told only by a renewal that
 * reaches the store), M_GRANT_AT_REPLY (the local deadline measured from a
 * renewal's reply instead of its send) (P6).
 *
 * Sizes (-D at compile time): N invocations (2..3), HEARTBEAT (invocation 0
 * has no deadline and renews its lease), SAME_TOKEN (the last invocation is
 * a retry of invocation 0 with its owner token, started after it ended, as
 * Lambda retries a request id), CACHE (invocations 0 and 2 share one
 * process and its local cache of completed records), NO_CRASH (the faults
 * are lost requests and replies only).
 */

#ifndef N
#define N 3
#endif
#ifndef B
#define B 1            /* the clock bound: a good clock is within B of T */
#endif
#ifdef M_NO_MARGIN
#define M (2*B - 1)    /* a margin below the bound */
#else
#ifndef M
#define M (2*B)        /* the lease margin (Config.LeaseMargin) */
#endif
#endif
#ifndef RUN
#define RUN 2          /* an invocation's time to its deadline */
#endif
#ifndef H
#define H 6            /* the heartbeat lease (Config.Heartbeat) */
#endif
/* The margin of a heartbeat run's local deadline: min(M, H/3). */
#define LM (M < H/3 -> M : H/3)
#ifndef TMAX
#define TMAX 7         /* the last tick explored */
#endif
#ifndef TRIES
#define TRIES 2        /* attempts of a complete or release (finish) */
#endif
#ifndef FAULTS
#define FAULTS 2       /* lost requests, lost replies and crashes, in all */
#endif
#ifndef RENEWS
#define RENEWS 2       /* renewals a heartbeat run makes at most */
#endif
/* The invocation that comes after invocation 0 in its execution
 * environment, if any. */
#if defined(SAME_TOKEN) || N > 2
#define SUCCESSOR (N - 1)
#else
#define SUCCESSOR NEVER
#endif
#define OFF B          /* clock readings are stored plus OFF */
#define WILD 4         /* a clock that runs ahead without bound */
#define NEVER 255      /* the deadline of a run that has none */

mtype = { ABSENT, INPROG, DONE };                 /* record status */
mtype = { CLAIMED, BUSY, REPLAY, MISMATCH, LOST }; /* claim answers */

/* The store's one record. */
mtype st = ABSENT;
byte own;       /* owner token */
byte rh;        /* fingerprint */
byte resp;      /* the stored response (a run's id + 1) */
byte lease;     /* lease, caller's time */

byte T;         /* true time */
byte faults;    /* faults injected so far */

/* Ghost state: what the properties are judged on. */
bool everDone;          /* the record was completed once */
byte doneResp;          /* ... with this response */
byte holder = NEVER;    /* the invocation whose claim the record is */
byte dl[N];             /* deadlines, true time */
bool crashed[N];
bool going[N];         /* claimed, and its handler has not returned */
bool ended[N];          /* the invocation has finished or died */
bool hb[N];             /* has no deadline: renews its lease */
bool exec[N];           /* its handler has started and not returned */
byte held[N];           /* a heartbeat run's local deadline, true time */

/* The local cache of completed records, per process. */
bool cv[2];
byte ch[2], cr[2];

#define alive(j)   (!crashed[j] && (hb[j] || T < dl[j]))
/* A heartbeat run has been told: its local deadline has passed (see
 * "Time"), and its handler has stopped. */
#ifdef M_NO_LOCAL_CANCEL
#define told(j)    false
#else
#define told(j)    (T >= held[j])
#endif
/* Invocation j's handler is executing. */
#define running(j) (exec[j] && alive(j) && !(hb[j] && told(j)))

/* A property is violated: the trail's replay prints which one. */
inline violated(p) {
	printf("VIOLATION P%d\n", p);
	assert(false)
}

/* Properties checked on every write of the record: P2 and P4. */
inline checkWrite(tk) {
	if
	:: st == DONE -> violated(2)
	:: else -> skip
	fi;
	if
	:: st != INPROG || own != tk -> violated(4)
	:: else -> skip
	fi
}

/* P6, when invocation i's handler starts: no other handler is executing. */
inline checkStart(i) {
	if
	:: i != 0 && running(0) -> violated(6)
#if N > 1
	:: i != 1 && running(1) -> violated(6)
#endif
#if N > 2
	:: i != 2 && running(2) -> violated(6)
#endif
	:: else -> skip
	fi
}

/* A clock reading, within the bound or (when wild is allowed) far ahead. */
inline readClock(v, wildOK) {
	if
	:: v = T + OFF - B
	:: v = T + OFF
	:: v = T + OFF + B
	:: wildOK -> v = T + OFF + WILD
	fi
}

#ifdef M_TAKEOVER_COMPLETED
/* a completed record whose (old) lease ran out counts as absent */
#define TAKEOVER_COMPLETED (st == DONE && lease <= eff)
#else
#define TAKEOVER_COMPLETED false
#endif

/* The claim, as the store runs it: one atomic step. now is the caller's
 * clock; the store reads its own. */
inline storeClaim(i, tk, h, now, l, ans) {
	readClock(sNow, now <= T + OFF + B);   /* not both clocks ahead of the bound */
#if defined(M_TAKER_CLOCK)
	eff = now;
#elif defined(M_STORE_CLOCK)
	eff = sNow;
#else
	eff = (now < sNow -> now : sNow);
#endif
	if
	:: st == ABSENT || (st == INPROG && lease <= eff) || TAKEOVER_COMPLETED ->
		if
		:: st == DONE -> violated(2)
		:: else -> skip
		fi;
		/* P1 and P5: the run whose record this takes over (one that
		 * holds it and may still run its handler) is no longer going,
		 * or, for a run with no deadline, its lease ran out by every
		 * clock that keeps the bound. */
		if
		:: st == INPROG && holder != i && going[holder] && alive(holder) ->
			if
			:: lease > T + OFF + B -> violated(1)
			:: !hb[holder] -> violated(5)
			:: else -> skip
			fi
		:: else -> skip
		fi;
		st = INPROG; own = tk; rh = h; lease = l; resp = 0;
		holder = i; going[i] = true; ans = CLAIMED
	:: else ->
		if
		:: rh != h -> ans = MISMATCH
		:: rh == h && st == DONE -> ans = REPLAY
		:: rh == h && st == INPROG && own == tk ->
			/* the same owner's claim again: a lost reply, or a retry
			 * that reuses the token after the first invocation ended */
			holder = i; going[i] = true; ans = CLAIMED
		:: rh == h && st == INPROG && own != tk -> ans = BUSY
		fi
	fi;
	sNow = 0; eff = 0
}

inline storeComplete(i, tk, r, ok) {
	if
#ifdef M_COMPLETE_ANY_OWNER
	:: st == INPROG ->
#else
	:: st == INPROG && own == tk ->
#endif
		checkWrite(tk);
		st = DONE; resp = r;
		if
		:: !everDone -> everDone = true; doneResp = r
		:: else -> skip
		fi;
		ok = true
	:: else -> ok = false
	fi
}

inline storeRelease(i, tk, ok) {
	if
#if defined(M_RELEASE_ANY_OWNER)
	:: st == INPROG ->
#elif defined(M_RELEASE_ANY_STATUS)
	:: st != ABSENT && own == tk ->
#else
	:: st == INPROG && own == tk ->
#endif
		checkWrite(tk);
		st = ABSENT; own = 0; rh = 0; resp = 0; lease = 0; holder = NEVER;
		ok = true
	:: else -> ok = false
	fi
}

inline storeRenew(i, tk, l, ok) {
	if
#ifdef M_RENEW_ANY_OWNER
	:: st == INPROG ->
#else
	:: st == INPROG && own == tk ->
#endif
		checkWrite(tk);
		lease = l; ok = true
	:: else -> ok = false
	fi
}

/* Inside an atomic step of invocation i: it dies here when its deadline
 * has passed, or crashes here (a fault). */
#ifdef NO_CRASH
#define CRASH false
#else
#define CRASH (faults < FAULTS)
#endif
#define STEP \
	if \
	:: !alive(i) -> goto dead \
	:: CRASH -> faults++; crashed[i] = true; goto dead \
	:: alive(i) -> skip \
	fi

/* One call, two atomic steps. The request: the caller is alive, and the
 * store acts on it at once, or it is lost before the store acts. The reply:
 * the caller is alive and gets it, or it is lost after the store acted.
 * fail is true when the caller saw no reply. A request that reaches the
 * store late needs no step of its own: its arguments were computed in an
 * earlier step (any other steps may come between), and a store that acts
 * after the caller died is the caller dying after the act. */
#define CALL(act) \
	atomic { \
		STEP; \
		if \
		:: act; acted = true \
		:: faults < FAULTS -> faults++; acted = false \
		fi \
	}; \
	atomic { \
		STEP; \
		if \
		:: acted -> fail = false \
		:: acted && faults < FAULTS -> faults++; fail = true \
		:: !acted -> fail = true \
		fi; \
		acted = false \
	}

proctype Inv(byte i; byte tk; byte h; byte p) {
	byte now, l, tries, sNow, eff, grant;
	mtype ans;
	bool ok, fail, acted;

	/* The third invocation is a later one in invocation 0's execution
	 * environment (its process, its cache): Lambda runs one invocation at
	 * a time in each. */
	if
	:: i == SUCCESSOR -> ended[0]
	:: else -> skip
	fi;
	atomic {
		if
		:: hb[i] -> dl[i] = NEVER
		:: else -> dl[i] = T + RUN
		fi;
#ifdef CACHE
		/* The local cache answers a completed record with no round trip. */
		if
		:: cv[p] && ch[p] == h ->
			if
			:: cr[p] != doneResp -> violated(3)
			:: else -> goto done
			fi
		:: cv[p] && ch[p] != h -> goto done    /* 422 */
		:: else -> skip
		fi;
#endif
		/* The claim's Now and LeaseUntil, from one reading of the
		 * caller's clock (engine.claim, leaseUntil). */
		STEP;
		readClock(now, true);
		if
		:: hb[i] -> l = now + H; held[i] = T + H - LM
		:: !hb[i] && dl[i] <= T -> l = now  /* a deadline passed: expired */
#ifdef M_FIXED_LEASE
		:: !hb[i] && dl[i] > T -> l = now + 1
#else
		:: !hb[i] && dl[i] > T -> l = now + (dl[i] - T) + M
#endif
		fi
	}
	CALL(storeClaim(i, tk, h, now, l, ans));
	if
	:: fail ->
		/* recoverClaim: the same claim once more, then a release. */
		CALL(storeClaim(i, tk, h, now, l, ans));
		if
		:: fail ->
			now = 0; l = 0;
			CALL(storeRelease(i, tk, ok));
			goto done                        /* 503 */
		:: else -> skip
		fi
	:: else -> skip
	fi;
	now = 0; l = 0;

	if
	:: ans == MISMATCH -> goto done            /* 422 */
	:: ans == BUSY -> goto done                /* 409 */
	:: ans == REPLAY ->
		atomic {
			if
			:: resp != doneResp -> violated(3)
			:: else -> skip
			fi;
#ifdef CACHE
			cv[p] = true; ch[p] = h; cr[p] = resp;
#endif
		}
		goto done
	:: ans == CLAIMED -> skip
	fi;
	ans = 0;

	/* The run: the handler starts. A heartbeat run whose claim came back
	 * after its local deadline is told at once (the engine's timer fires
	 * as the handler starts), and its handler, which checks its context
	 * before a side effect, does nothing. */
	atomic {
		STEP;
		if
		:: hb[i] && told(i) -> skip
		:: else -> checkStart(i)
		fi;
		exec[i] = true
	}
	/* A heartbeat run renews its lease while the handler runs, until it is
	 * told. A renewal that succeeds moves the local deadline to its send's
	 * grant; one that finds the lease lost cancels the handler's context,
	 * and the handler stops. The handler may stop at any time. */
	do
	:: hb[i] && tries < RENEWS && !told(i) ->
		tries++;
		atomic { readClock(now, true); l = now + H; grant = T + H - LM; now = 0 }
		CALL(storeRenew(i, tk, l, ok));
#ifdef M_GRANT_AT_REPLY
		atomic { grant = T + H - LM }
#endif
		if
		:: told(i) -> break                 /* stopped: the renewals end */
		:: else ->
			if
			:: !fail && ok -> held[i] = grant
			:: !fail && !ok -> break
			:: else -> skip
			fi
		fi;
		l = 0; grant = 0; ok = false
	:: break
	od;
	atomic { STEP; going[i] = false; exec[i] = false; grant = 0; tries = 0 }

	/* The finish: complete (the handler succeeded) or release (it failed,
	 * panicked, or answered what is not stored), retried after a failure
	 * up to TRIES attempts (engine.finish). */
	if
	:: true ->
		do
		:: tries < TRIES ->
			tries++;
			CALL(storeComplete(i, tk, i + 1, ok));
			if
			:: !fail ->
#ifdef CACHE
#if defined(M_CACHE_ANY_FINISH)
				cv[p] = true; ch[p] = h; cr[p] = i + 1;
#else
				if
				:: ok -> cv[p] = true; ch[p] = h; cr[p] = i + 1
				:: else -> skip
				fi;
#endif
#endif
				break
			:: else -> skip
			fi
		:: else -> break
		od
	:: true ->
		do
		:: tries < TRIES ->
			tries++;
			CALL(storeRelease(i, tk, ok));
			if
			:: !fail -> break
			:: else -> skip
			fi
		:: else -> break
		od
	fi;
dead:
done:
	atomic {
		going[i] = false; exec[i] = false; held[i] = 0; crashed[i] = false; dl[i] = 0;
		now = 0; l = 0; grant = 0; tries = 0; ans = 0; ok = false; fail = false;
		ended[i] = true
	}
}

active proctype Clock() {
	do
	:: atomic { T < TMAX -> T++ }
	:: T == TMAX -> break
	od
}

init {
	atomic {
#ifdef HEARTBEAT
		hb[0] = true;
#endif
		run Inv(0, 1, 1, 0);
#if defined(SAME_TOKEN) && N == 2
		run Inv(1, 1, 1, 0);       /* a retry of invocation 0's request id */
#elif N > 1
		run Inv(1, 2, 1, 1);
#endif
#if N > 2
#ifdef SAME_TOKEN
		run Inv(2, 1, 1, 0);       /* a retry of invocation 0's request id */
#else
		if
		:: run Inv(2, 3, 1, 0)
		:: run Inv(2, 3, 2, 0)     /* another request with the same key */
		fi
#endif
#endif
	}
}
