package schedule

import "time"

// CountBefore counts the timeouts held (armed, held and in flight) by
// deadline at one instant. It calls bounds with the latest deadline held,
// truncated to the second (the zero Time when nothing is held), and
// returns, for each time bounds returned, the number of timeouts whose
// deadline second is before that time's second, and the total held, which
// is what Len returned at that instant. bounds must return non-decreasing
// times; it runs under the schedule's lock and must not call the Schedule.
//
// Cost, under the lock that ingest and the fire path also take: a pass
// over the distinct deadline hours held, plus at most 236 map lookups and
// one per whole hour between consecutive bounds (BenchmarkCountBefore
// measures it). It never passes over the timeouts themselves.
func (s *Schedule) CountBefore(bounds func(latest time.Time) []time.Time) (before []int64, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var latest time.Time
	if sec, ok := s.deadlines.latest(); ok {
		latest = time.Unix(sec, 0).UTC()
	}
	bs := bounds(latest)
	before = make([]int64, len(bs))
	for i, b := range bs {
		if i == 0 {
			before[i] = s.deadlines.below(b.Unix())
			continue
		}
		before[i] = before[i-1] + s.deadlines.between(bs[i-1].Unix(), b.Unix())
	}
	return before, int64(s.x.len())
}

// deadlineCounts counts timeouts by deadline at three resolutions, in
// seconds, minutes and hours since 1970 (deadlines are never earlier), so
// that counting over a range of seconds takes a bounded number of lookups:
// the ragged ends by second and minute, the whole hours by hour. A zero
// count has no entry.
type deadlineCounts struct {
	bySecond, byMinute, byHour map[int64]int64
}

func newDeadlineCounts() deadlineCounts {
	return deadlineCounts{bySecond: make(map[int64]int64), byMinute: make(map[int64]int64), byHour: make(map[int64]int64)}
}

// add adds n to the count of the deadline second sec.
func (c deadlineCounts) add(sec, n int64) {
	addCount(c.bySecond, sec, n)
	addCount(c.byMinute, sec/60, n)
	addCount(c.byHour, sec/3600, n)
}

func addCount(m map[int64]int64, k, n int64) {
	if v := m[k] + n; v != 0 {
		m[k] = v
	} else {
		delete(m, k)
	}
}

// between returns the count of the deadline seconds in [lo, hi): at most
// 2×59 lookups by second, 2×59 by minute and one per whole hour.
func (c deadlineCounts) between(lo, hi int64) (n int64) {
	for ; lo < hi && lo%60 != 0; lo++ {
		n += c.bySecond[lo]
	}
	for ; lo < hi && hi%60 != 0; hi-- {
		n += c.bySecond[hi-1]
	}
	lo, hi = lo/60, hi/60 // whole minutes from here on
	for ; lo < hi && lo%60 != 0; lo++ {
		n += c.byMinute[lo]
	}
	for ; lo < hi && hi%60 != 0; hi-- {
		n += c.byMinute[hi-1]
	}
	for h := lo / 60; h < hi/60; h++ {
		n += c.byHour[h]
	}
	return n
}

// below returns the count of the deadline seconds before sec: a pass over
// the hours, then the rest of sec's hour.
func (c deadlineCounts) below(sec int64) (n int64) {
	hour := sec / 3600
	for h, k := range c.byHour {
		if h < hour {
			n += k
		}
	}
	return n + c.between(hour*3600, sec)
}

// latest returns the latest deadline second counted: a pass over the
// hours, then at most 60 lookups by minute and 60 by second.
func (c deadlineCounts) latest() (sec int64, ok bool) {
	if len(c.byHour) == 0 {
		return 0, false
	}
	hour := maxKey(c.byHour)
	m := hour*60 + 59
	for c.byMinute[m] == 0 {
		m--
	}
	sec = m*60 + 59
	for c.bySecond[sec] == 0 {
		sec--
	}
	return sec, true
}

func maxKey(m map[int64]int64) int64 {
	first := true
	var top int64
	for k := range m {
		if first || k > top {
			top, first = k, false
		}
	}
	return top
}
