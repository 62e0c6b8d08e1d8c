package pgtest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// cronSchedule is a five-field cron schedule (minute, hour, day of month,
// month, day of week), the schedules pg_cron 1.4 takes: each field '*', a
// number, a range a-b, any of them with a step /n, or a comma list of
// those. As in cron, when both day fields are restricted a day matching
// either one matches.
type cronSchedule struct {
	minute, hour, dom, month, dow uint64 // bit i set: value i matches
	domAny, dowAny                bool
}

// parseCronSchedule parses s, or says why it cannot.
func parseCronSchedule(s string) (cronSchedule, error) {
	f := strings.Fields(s)
	if len(f) != 5 {
		return cronSchedule{}, fmt.Errorf("pgtest: fake cron: schedule %q: want five fields (minute hour day month weekday)", s)
	}
	var c cronSchedule
	for i, spec := range []struct {
		into     *uint64
		min, max int
	}{{&c.minute, 0, 59}, {&c.hour, 0, 23}, {&c.dom, 1, 31}, {&c.month, 1, 12}, {&c.dow, 0, 7}} {
		bits, err := cronField(f[i], spec.min, spec.max)
		if err != nil {
			return cronSchedule{}, fmt.Errorf("pgtest: fake cron: schedule %q: %w", s, err)
		}
		*spec.into = bits
	}
	if c.dow&(1<<7) != 0 { // 7 is Sunday too
		c.dow |= 1
	}
	c.domAny, c.dowAny = f[2] == "*", f[4] == "*"
	return c, nil
}

func cronField(field string, min, max int) (uint64, error) {
	var bits uint64
	for _, part := range strings.Split(field, ",") {
		step := 1
		if r, s, ok := strings.Cut(part, "/"); ok {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("bad step in %q", part)
			}
			part, step = r, n
		}
		lo, hi := min, max
		if part != "*" {
			a, b, isRange := strings.Cut(part, "-")
			var err error
			if lo, err = strconv.Atoi(a); err != nil {
				return 0, fmt.Errorf("bad value in %q", field)
			}
			hi = lo
			if isRange {
				if hi, err = strconv.Atoi(b); err != nil {
					return 0, fmt.Errorf("bad range in %q", field)
				}
			} else if step > 1 {
				hi = max // a/n: from a to the end, every n
			}
		}
		if lo < min || hi > max || lo > hi {
			return 0, fmt.Errorf("%q is outside %d-%d", field, min, max)
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << v
		}
	}
	return bits, nil
}

// matches says whether the schedule runs a job in the minute t starts.
func (c cronSchedule) matches(t time.Time) bool {
	has := func(bits uint64, v int) bool { return bits&(1<<v) != 0 }
	if !has(c.minute, t.Minute()) || !has(c.hour, t.Hour()) || !has(c.month, int(t.Month())) {
		return false
	}
	dom, dow := has(c.dom, t.Day()), has(c.dow, int(t.Weekday()))
	switch {
	case c.domAny && c.dowAny:
		return true
	case c.domAny:
		return dow
	case c.dowAny:
		return dom
	}
	return dom || dow
}
