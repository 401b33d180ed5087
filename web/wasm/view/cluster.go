package view

import (
	"strconv"
	"strings"
)

// Member is one line of the cluster table: a live timeoutd instance.
type Member struct {
	ID string
	// Self marks the instance serving this page.
	Self bool
	// Partitions is how many it owns; Ranges lists them compactly
	// ("0-9, 12, 40-63").
	Partitions, Ranges     string
	Pending, FiredRate     string
	LatencyP50, LatencyMax string
}

// ClusterSummary is the caption of the cluster table, e.g. "3 instances,
// 60 of 64 partitions may fire, 4 opening": whether each partition's owner
// may fire it now, and why not, as the serving instance's last lease round
// read the leases by their rules and each owner's gate. Before the first
// round (or from an instance that does not report it) it counts the
// partitions owned.
func (s *State) ClusterSummary() string {
	c := s.Cluster
	n := len(c.Instances)
	word := "instances"
	if n == 1 {
		word = "instance"
	}
	head := strconv.Itoa(n) + " " + word + ", "
	if len(c.Ownership) == 0 {
		owned := 0
		for _, in := range c.Instances {
			owned += len(in.Partitions)
		}
		return head + strconv.Itoa(owned) + " of " + strconv.Itoa(c.Partitions) + " partitions owned"
	}
	why := map[string]int{}
	for _, o := range c.Ownership {
		if !o.MayFire {
			why[o.Why]++
		}
	}
	out := head + strconv.Itoa(c.MayFire) + " of " + strconv.Itoa(c.Partitions) + " partitions may fire"
	for _, r := range whyNot {
		if k := why[r.why]; k > 0 {
			out += ", " + strconv.Itoa(k) + " " + r.words
		}
	}
	return out
}

// whyNot are the reasons a partition may not be fired, as the summary
// says them, in its order.
var whyNot = []struct{ why, words string }{
	{"opening", "opening"}, {"in_grace", "in grace"}, {"untrusted", "untrusted"},
	{"out_of_contact", "out of contact"}, {"unowned", "unowned"},
}

// Members formats the cluster's instances, in the server's order (by id).
func (s *State) Members() []Member {
	out := make([]Member, len(s.Cluster.Instances))
	for i, in := range s.Cluster.Instances {
		out[i] = Member{
			ID: in.ID, Self: in.Self,
			Partitions: strconv.Itoa(len(in.Partitions)), Ranges: Ranges(in.Partitions),
			Pending: FormatCount(in.Pending), FiredRate: FormatRate(in.FiredPerSec),
			LatencyP50: FormatMillis(in.LatenessP50Ms), LatencyMax: FormatMillis(in.LatenessMaxMs),
		}
	}
	return out
}

// Ranges formats sorted partition numbers as ranges: [0 1 2 5 7 8] is
// "0-2, 5, 7-8"; none is "none".
func Ranges(parts []int) string {
	if len(parts) == 0 {
		return "none"
	}
	var b strings.Builder
	for i := 0; i < len(parts); {
		j := i
		for j+1 < len(parts) && parts[j+1] == parts[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(parts[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(parts[j]))
		}
		i = j + 1
	}
	return b.String()
}
