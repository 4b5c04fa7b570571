//go:build linux && cgo

package main

/*
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
	int64_t period;      // ns between deadlines
	int stop;            // set by sleeper_end (atomic)
	int64_t *late;       // ns each wake came after its deadline
	size_t n, cap;
	int64_t cpu;         // the thread's own CPU time at its end, ns (CLOCK_THREAD_CPUTIME_ID)
	pthread_t th;
} sleeper_t;

static int64_t mono_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// sleeper_run is the whole sleeper: a plain pthread, no signals delivered to it (the Go
// runtime's preemption and profiling signals go to its own threads), sleeping to absolute
// deadlines k*period apart and writing down how late each wake is. Nothing of Go's runs on
// it: this is what any C program on this machine, at this moment, would get.
static void *sleeper_run(void *arg) {
	sleeper_t *s = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); // as the dispatcher's thread: no 50 µs slack
	int64_t next = mono_ns() + s->period;
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		struct timespec d = { .tv_sec = next / 1000000000LL, .tv_nsec = next % 1000000000LL };
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) == EINTR) {
		}
		int64_t late = mono_ns() - next;
		if (s->n == s->cap) {
			size_t c = s->cap ? 2 * s->cap : 4096;
			int64_t *p = realloc(s->late, c * sizeof *p);
			if (!p) {
				break;
			}
			s->late = p;
			s->cap = c;
		}
		s->late[s->n++] = late;
		next += s->period;
	}
	struct timespec c;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
	s->cpu = (int64_t)c.tv_sec * 1000000000LL + c.tv_nsec;
	return NULL;
}

static sleeper_t *sleeper_start(int64_t period) {
	sleeper_t *s = calloc(1, sizeof *s);
	if (!s) {
		return NULL;
	}
	s->period = period;
	if (pthread_create(&s->th, NULL, sleeper_run, s) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

// sleeper_end stops and joins the thread (within a period); the caller frees s->late and s.
static void sleeper_end(sleeper_t *s) {
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
	pthread_join(s->th, NULL);
}
*/
import "C"

import (
	"time"
	"unsafe"
)

// sleeper is the C-like floor under the dispatcher's lateness (the least lateness any
// thread on this machine gets, so the dispatcher's is read beside it): a pthread
// created in C that sleeps to absolute deadlines k·period apart
// (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)) and records how late each wake is,
// with no Go runtime involvement while it sleeps or wakes (no P to get back, no signals:
// it blocks them all). Its lateness is the kernel's timer slack plus the wait for a core
// on this machine at this moment; replay's dispatcher sleeps the same way
// (replay/waiter_linux.go) but must then get a P back, which this thread never needs.
// Without cgo, startSleeper is the pure-Go sleeper (sleeper_go_linux.go).
type sleeper struct{ c *C.sleeper_t }

// startSleeper starts the sleeper; the first deadline is one period from now.
func startSleeper(period time.Duration) *sleeper {
	return &sleeper{c: C.sleeper_start(C.int64_t(max(period, time.Microsecond)))}
}

// end stops the sleeper and returns the p50, p99 and maximum of how late its wakes were,
// in milliseconds (zeros if it could not start or never woke).
func (s *sleeper) end() (p50, p99, max float64) {
	p50, p99, max, _ = s.endCPU()
	return p50, p99, max
}

// endCPU is end, and the sleeper thread's own CPU time: the benchmark's instrument, taken
// out of the replayer's CPU as the sampler's is.
func (s *sleeper) endCPU() (p50, p99, max float64, cpu time.Duration) {
	if s.c == nil {
		return 0, 0, 0, 0
	}
	C.sleeper_end(s.c)
	defer func() {
		C.free(unsafe.Pointer(s.c.late))
		C.free(unsafe.Pointer(s.c))
		s.c = nil
	}()
	cpu = time.Duration(s.c.cpu)
	if s.c.n == 0 {
		return 0, 0, 0, cpu
	}
	p50, p99, max = lateStats(unsafe.Slice((*int64)(unsafe.Pointer(s.c.late)), int(s.c.n)))
	return p50, p99, max, cpu
}
