package bench

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scrape is one reading of the server's /metrics, a line per sample.
type scrape []string

// scrape reads /metrics once; the values a measurement compares are taken
// from the same reading.
func (s *serverProc) scrape(ctx context.Context) (scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var lines scrape
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" && line[0] != '#' {
			lines = append(lines, line)
		}
	}
	return lines, sc.Err()
}

// metric reads one metric family's sum from a fresh scrape.
func (s *serverProc) metric(ctx context.Context, name string) (float64, error) {
	sc, err := s.scrape(ctx)
	if err != nil {
		return 0, err
	}
	return sc.sum(name)
}

// sum is the sum of every sample of a metric family.
func (sc scrape) sum(name string) (float64, error) {
	total, found := 0.0, false
	for _, line := range sc {
		if !strings.HasPrefix(line, name) || len(line) == len(name) || (line[len(name)] != ' ' && line[len(name)] != '{') {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		total, found = total+v, true
	}
	if !found {
		return 0, fmt.Errorf("the server's /metrics has no %s", name)
	}
	return total, nil
}

// buckets are a histogram's cumulative bucket counts (upper bound → count).
func (sc scrape) buckets(name string) (map[float64]float64, error) {
	out := map[float64]float64{}
	prefix := name + `_bucket{le="`
	for _, line := range sc {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		bound, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(count, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("metric %s: bad bucket %q", name, line)
		}
		out[bound] = n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the server's /metrics has no histogram %s", name)
	}
	return out, nil
}

// histogramQuantile estimates the q-quantile of what was observed between
// two readings of a histogram, interpolating linearly inside the bucket
// as Prometheus's histogram_quantile does.
func histogramQuantile(before, after map[float64]float64, q float64) time.Duration {
	bounds := make([]float64, 0, len(after))
	for b := range after {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range bounds {
		n := after[b] - before[b]
		if n >= rank {
			if math.IsInf(b, 1) {
				return time.Duration(lower * float64(time.Second)) // past the last bound: report it
			}
			frac := (rank - below) / max(n-below, 1e-9)
			return time.Duration((lower + (b-lower)*frac) * float64(time.Second))
		}
		lower, below = b, n
	}
	return 0
}
