package cputime

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Of is the user+system CPU time of another process so far, from /proc/PID/stat (fields
// 14 and 15, utime and stime, in clock ticks; proc(5)). The ticks are USER_HZ, 100 a
// second on every Linux architecture Go builds for, so the figure moves in 10 ms steps:
// measure windows of seconds. getrusage of a child gives microseconds, but only after it
// has exited.
func Of(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count fields from
	// its closing parenthesis, the last one in the line.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name, want at least 13", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q: not numbers", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}
