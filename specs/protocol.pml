/*
 * spillvault's publication / reconciliation / GC protocol in Promela: the same
 * model as spillvault.specs.protocol_model (one artifact, one lease, one owner
 * reference), cross-checked with Spin.  The four safeguards are -D flags:
 *
 *   spin -a -DREVERIFY -DWRITER_LOCK -DFENCE -DTOMB_FIRST protocol.pml
 *   gcc -O2 -DSAFETY -o pan pan.c && ./pan
 *
 * REVERIFY     GC apply re-checks the lease under the session lock
 * WRITER_LOCK  prepare's re-verify and PREPARED record hold the session lock
 * FENCE        the owner's seal and publish CAS on the generation
 * TOMB_FIRST   tombstone before ABORTED, never the reverse
 *
 * With all four: "errors: 0".  Without any one: an assertion violation.
 */

/* BEGIN lease rules: generated from lease.toml by
   python -m spillvault.specs.protocol_model --write-promela */
#define NO_LEASE 0
#define PREPARED 1
#define COMMITTED 2
#define RELEASED 3
#define ABORTED 4
#define CREATED PREPARED
#define LIVE(p) (p == PREPARED || p == COMMITTED)
#define CAN_RELEASE(p) (p == COMMITTED)
inline fire_commit() {
  if
  :: lease == PREPARED -> lease = COMMITTED
  :: else -> skip
  fi
}
inline fire_abort() {
  if
  :: lease == PREPARED -> lease = ABORTED
  :: else -> skip
  fi
}
inline fire_release() {
  if
  :: lease == COMMITTED -> lease = RELEASED
  :: else -> skip
  fi
}
/* END lease rules */

#define FREE 0
#define BY_WRITER 1
#define BY_GC 2

bool artifact = true;     /* the artifact file exists */
byte lease = NO_LEASE;
byte lock = FREE;         /* the session lock */
byte gen = 0;             /* the owner's generation for the transaction id */
bool published = false;   /* the owner's reference is visible */
bool tombstoned = false;
byte wgen = 0;            /* the generation the writer read */
bool in_flight = false;   /* a publish request exists that the zombie may replay */

#ifdef FENCE
#define GEN_OK(g) (gen == g)
#define SEAL_OK(g) (gen == g && !published)
#else
#define GEN_OK(g) true
#define SEAL_OK(g) true
#endif
/* a tombstone refuses every write of the id */
#define ACCEPTS(g) (!tombstoned && GEN_OK(g))

#ifdef WRITER_LOCK
#define W_UNLOCK lock = FREE
#else
#define W_UNLOCK skip
#endif

/* no artifact a live lease protects is deleted; no reference to a deleted one */
#define PROPERTY (artifact || (!LIVE(lease) && !published))

active proctype Writer() {
#ifdef WRITER_LOCK
  atomic { lock == FREE -> lock = BY_WRITER };
#endif
  if
  :: atomic { !artifact -> W_UNLOCK; goto done }   /* refuse */
  :: atomic { artifact -> skip }                    /* verify_ok */
  fi;
  atomic { lease = CREATED; W_UNLOCK };             /* record_prepared */
  atomic { wgen = gen };                            /* read_generation */
  if
  :: atomic { ACCEPTS(wgen) -> published = true; gen++; in_flight = true };
     atomic { fire_commit() }
  :: atomic { !ACCEPTS(wgen) -> in_flight = true };
     atomic { fire_abort() }
  :: in_flight = true                               /* give_up: request still in flight */
  fi;
done:
  skip
}

/* the writer's request, delivered (again) late with the generation it read */
active proctype Zombie() {
end:
  atomic {
    in_flight ->
    if
    :: ACCEPTS(wgen) -> published = true; gen++
    :: else -> skip
    fi
  }
}

active proctype Reconciler() {
  byte sg = 0;
  bool sp = false;
  bool ss = false;
end:
  do
  :: atomic { lease == CREATED -> sg = gen; sp = published; ss = tombstoned };
     if
     :: atomic { sp -> fire_commit(); sg = 0; sp = false }
     :: atomic { !sp && ss -> fire_abort(); sg = 0; ss = false }
#ifdef TOMB_FIRST
     :: atomic { !sp && !ss && SEAL_OK(sg) -> tombstoned = true; gen++; sg = 0 };
        if
        :: atomic { fire_abort() }
        :: skip   /* crash: the next pass finds the id already sealed */
        fi
     :: atomic { !sp && !ss && !SEAL_OK(sg) -> sg = 0 }   /* pending_stale */
#else
     :: atomic { !sp && !ss -> fire_abort() };
        atomic {
          if
          :: SEAL_OK(sg) -> tombstoned = true; gen++
          :: else -> skip
          fi;
          sg = 0
        }
#endif
     fi
  od
}

active proctype GC() {
end:
  do
  :: atomic { artifact && !LIVE(lease) -> skip };      /* plan, without the lock */
     atomic { lock == FREE -> lock = BY_GC };
#ifdef REVERIFY
     if
     :: atomic { LIVE(lease) -> lock = FREE }          /* retained_referenced */
     :: atomic { !LIVE(lease) -> skip };
        atomic { artifact = false; lock = FREE };      /* quarantine, verify, unlink */
        break
     fi
#else
     atomic { artifact = false; lock = FREE };
     break
#endif
  od
}

/* the owner removes its reference (tombstoning the id), then the lease is released */
active proctype Owner() {
end:
  atomic { published && CAN_RELEASE(lease) -> published = false; tombstoned = true; gen++ };
  atomic { fire_release() }
}

active proctype Monitor() {
end:
  atomic { !PROPERTY -> assert(PROPERTY) }
}
