package view

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Countdown formats the time left before a deadline, rounded up to the
// second so it reaches "0s" only at the deadline: "42s", "4m05s", "3h04m",
// "2d03h", and "due" once it passed.
func Countdown(left time.Duration) string {
	if left <= 0 {
		return "due"
	}
	s := int64((left + time.Second - 1) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	default:
		return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
	}
}

// FormatInstant formats an instant in UTC as its time of day with
// milliseconds, "15:04:05.000", preceded by its date when it is not on
// the UTC day of today, the server's current time as the browser sees it:
// "Nov 24 15:04:05.000", or "2027-01-02 15:04:05.000" in another year.
// The zero time is "–".
func FormatInstant(t, today time.Time) string {
	if t.IsZero() {
		return "–"
	}
	t, today = t.UTC(), today.UTC()
	switch {
	case t.Year() != today.Year():
		return t.Format("2006-01-02 15:04:05.000")
	case t.YearDay() != today.YearDay():
		return t.Format("Jan 2 15:04:05.000")
	default:
		return t.Format("15:04:05.000")
	}
}

// FormatSpan formats a duration of whole seconds compactly, for the axis
// of the deadlines' histogram: "0s", "30s", "1m30s", "5m", "2h", "1h30m",
// "1d".
func FormatSpan(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600 && s%60 == 0:
		return fmt.Sprintf("%dm", s/60)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400 && s%3600 == 0:
		return fmt.Sprintf("%dh", s/3600)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	case s%86400 == 0:
		return fmt.Sprintf("%dd", s/86400)
	default:
		return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
	}
}

// FormatMillis formats a duration given in milliseconds: "0.4 ms",
// "12 ms", "3.4 s", "2m05s".
func FormatMillis(ms float64) string {
	switch {
	case math.IsNaN(ms) || ms < 0:
		return "–"
	case ms < 10:
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	case ms < 1000:
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	case ms < 60000:
		return strconv.FormatFloat(ms/1000, 'f', 1, 64) + " s"
	default:
		return Countdown(time.Duration(ms * float64(time.Millisecond)))
	}
}

// FormatRate formats a per-second rate: "0/s", "3.5/s", "120/s", "12.3k/s".
func FormatRate(perSec float64) string {
	switch {
	case math.IsNaN(perSec) || perSec <= 0:
		return "0/s"
	case perSec < 100:
		return strconv.FormatFloat(perSec, 'f', 1, 64) + "/s"
	case perSec < 10000:
		return strconv.FormatFloat(perSec, 'f', 0, 64) + "/s"
	default:
		return strconv.FormatFloat(perSec/1000, 'f', 1, 64) + "k/s"
	}
}

// FormatCount formats a count with thousands separators: "1,000,000".
func FormatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	if neg {
		out = append(out, '-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// ShortKeyLen is the longest key ShortKey leaves whole.
const ShortKeyLen = 16

// shortKeyTail is how many of a long key's last characters ShortKey keeps.
const shortKeyTail = 8

// ShortKey abbreviates a long key (a UUID order id, say) to its last eight
// characters, "…a6a6d5aa", for narrow columns. Time-ordered ids (UUIDv7,
// ULID) begin alike for orders created close together; their tail is
// random, so the tail is what tells rows apart.
func ShortKey(key string) string {
	if len(key) <= ShortKeyLen {
		return key
	}
	return "…" + key[len(key)-shortKeyTail:]
}
