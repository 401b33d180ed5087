package harness

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// DiskWait returns the time every request to the machine's disks has
// waited and been served, summed since boot: the weighted I/O time of
// /proc/diskstats (its 14th field), over the whole disks of /sys/block
// (partitions, loop and RAM devices left out). Over an interval it grows
// by the interval times the average number of requests in flight, so a
// stalled disk shows as a jump.
func DiskWait() (time.Duration, error) {
	f, err := os.Open("/proc/diskstats")
	if err != nil {
		return 0, fmt.Errorf("disk wait: %w", err)
	}
	defer f.Close()
	return diskWait(f, func(dev string) bool {
		if strings.HasPrefix(dev, "loop") || strings.HasPrefix(dev, "ram") || strings.HasPrefix(dev, "zram") {
			return false
		}
		_, err := os.Stat("/sys/block/" + dev)
		return err == nil
	})
}

// diskWait sums the weighted I/O time of the devices of r (the format of
// /proc/diskstats) for which disk is true.
func diskWait(r io.Reader, disk func(dev string) bool) (time.Duration, error) {
	var ms int64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 14 || !disk(f[2]) {
			continue
		}
		n, err := strconv.ParseInt(f[13], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("disk wait: %s: %w", f[2], err)
		}
		ms += n
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("disk wait: %w", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
