package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/parquettest"
	"github.com/llmreplay/llmreplay/replay/results"
)

func closedMeta(c int, ramp time.Duration) results.RunMeta {
	m := testRun()
	m.Mode, m.Speedup, m.Concurrency, m.RampUpNS = results.ModeClosed, 0, c, int64(ramp)
	return m
}

// closedSpec shapes a closed-loop fixture built by the results contract's closed-loop rules:
// c workers share one queue of c·perWorker requests; worker w starts at w·ramp/c and takes
// the next request whenever it is free, so each request is scheduled when its worker
// became free (its start, then the end of its previous request). A worker's first request
// is sent firstLate(w) late, the k-th request after the first wave steadyLate(k) late.
type closedSpec struct {
	c, perWorker int
	ramp         time.Duration
	firstLate    func(w int) int64
	steadyLate   func(k int) int64
	ttft, gap    func(rng *rand.Rand) int64 // ns
	out          func(rng *rand.Rand) int32
	seed         uint64
}

func closedRun(s closedSpec) []row {
	rng := rand.New(rand.NewPCG(s.seed, 3))
	var rows []row
	free := make([]int64, s.c)
	started := make([]bool, s.c)
	for w := range free {
		free[w] = int64(w) * int64(s.ramp) / int64(s.c)
	}
	k := 0
	for range s.c * s.perWorker {
		w := 0
		for v := range free {
			if free[v] < free[w] {
				w = v
			}
		}
		sched := free[w]
		late := s.firstLate(w)
		if started[w] {
			late = s.steadyLate(k)
			k++
		}
		started[w] = true
		sent := sched + late
		out := s.out(rng)
		var chunks []int64
		c := s.ttft(rng)
		for range out {
			chunks = append(chunks, c)
			c += s.gap(rng)
		}
		r := row{id: int64(len(rows)), scheduled: sched, sent: p64(sent), chunks: chunks, prompt: 256, promptServer: p32(256),
			outTarget: out, out: p32(out), source: "usage", status: "ok"}
		r.first, r.end = p64(sent+chunks[0]), p64(sent+chunks[len(chunks)-1])
		free[w] = *r.end
		rows = append(rows, r)
	}
	return rows
}

// wireSpeedWave sends the first wave of c requests one after the other over total ns, as a
// client does when it opens connections for them: worker w's first request is w·total/c late.
func wireSpeedWave(c int, total int64) func(int) int64 {
	return func(w int) int64 { return int64(w) * total / int64(c-1) }
}

func fixedNS(v int64) func(*rand.Rand) int64 { return func(*rand.Rand) int64 { return v } }

// burstRun is 64 workers of 20 requests each whose first wave takes 30 ms to send.
func burstRun(steadyLateNS int64) []row {
	return closedRun(closedSpec{c: 64, perWorker: 20, firstLate: wireSpeedWave(64, 30*ms_),
		steadyLate: func(int) int64 { return steadyLateNS },
		ttft:       fixedNS(50 * ms_), gap: fixedNS(10 * ms_), out: func(*rand.Rand) int32 { return 32 }, seed: 1})
}

// A first wave sent over 30 ms with a steady state at 0.2 ms is not client-limited in closed
// loop, and the same lateness in an open-loop run is; a steady state at 20 ms is flagged.
func TestClosedLoopJudgesSteadyState(t *testing.T) {
	opts := DefaultOptions()
	analyze := func(rows []row, m results.RunMeta) *Report {
		t.Helper()
		r, err := Analyze(load(t, rows, m), opts)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	calm := burstRun(200_000)
	r := analyze(calm, closedMeta(64, 0))
	c := r.Closed
	if c == nil {
		t.Fatal("closed-loop run has no Closed section")
	}
	if c.Concurrency != 64 || c.RampUpS != 0 || c.FirstWaveRequests != 64 || c.FirstWaveLateness.N != 64 || c.SteadyLateness.N != 64*19 {
		t.Errorf("closed loop = %+v", *c)
	}
	near(t, "first wave send", c.FirstWaveSendS, 0.030)
	near(t, "first wave lateness max", c.FirstWaveLateness.Max, 30)
	near(t, "steady lateness p99", c.SteadyLateness.P99, 0.2)
	if r.Lateness.P99 <= 10 {
		t.Fatalf("fixture: whole-run lateness p99 %v ms should exceed the bound", r.Lateness.P99)
	}
	if r.Flags.ClientLimited {
		t.Errorf("closed loop flagged client-limited by its first wave: %v", r.Warnings)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	for _, want := range []string{
		"client-limited: no (closed loop: steady state after the first wave of 64 requests, sent in 30.0 ms; its schedule lateness p99 0.200 ms, bound 10ms)",
		"Closed loop: concurrency 64, ramp-up 0.000 s",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}

	open := analyze(calm, testRun())
	if open.Closed != nil || !open.Flags.ClientLimited {
		t.Errorf("the same lateness in open loop: closed %v, client-limited %v (p99 %v ms)", open.Closed, open.Flags.ClientLimited, open.Lateness.P99)
	}

	slow := analyze(burstRun(20*ms_), closedMeta(64, 0))
	if !slow.Flags.ClientLimited {
		t.Errorf("steady-state lateness p99 %v ms not flagged", slow.Closed.SteadyLateness.P99)
	}
	want := "client-limited (closed loop: steady state after the first wave of 64 requests, sent in 30.0 ms): schedule lateness p99 20.000 ms > 10ms"
	if !strings.Contains(strings.Join(slow.Warnings, "\n"), want) {
		t.Errorf("warnings lack %q: %q", want, slow.Warnings)
	}
}

// A client that cannot keep its workers busy now and then (2% of steady-state sends 15 ms
// late: a slow prompt build, a stalled send) is flagged; at 0.5% it is not, the p99 rule.
func TestClosedLoopSlowClientPath(t *testing.T) {
	for _, c := range []struct {
		every   int
		limited bool
	}{{50, true}, {200, false}} {
		rows := closedRun(closedSpec{c: 16, perWorker: 100, firstLate: func(int) int64 { return 0 },
			steadyLate: func(k int) int64 {
				if k%c.every == 7 {
					return 15 * ms_
				}
				return 100_000
			},
			ttft: fixedNS(20 * ms_), gap: fixedNS(5 * ms_), out: func(*rand.Rand) int32 { return 8 }, seed: 2})
		r, err := Analyze(load(t, rows, closedMeta(16, 0)), DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		if r.Flags.ClientLimited != c.limited {
			t.Errorf("1 in %d sends 15 ms late: client-limited %v (steady p99 %v ms), want %v", c.every, r.Flags.ClientLimited, r.Closed.SteadyLateness.P99, c.limited)
		}
	}
}

// With --ramp-up the first wave is every request scheduled by the last worker's start,
// ramp·(c−1)/c: worker 0's second request, due before worker 3 starts, belongs to it.
func TestClosedLoopRampUp(t *testing.T) {
	rows := closedRun(closedSpec{c: 4, perWorker: 3, ramp: 4 * time.Second, firstLate: func(int) int64 { return 0 },
		steadyLate: func(int) int64 { return 0 },
		ttft:       fixedNS(500 * ms_), gap: fixedNS(100 * ms_), out: func(*rand.Rand) int32 { return 11 }, seed: 3})
	// Requests take 1.5 s; workers start at 0, 1, 2 and 3 s, the last one's start: by then
	// worker 0 has taken two more requests (due 1.5 and 3 s) and worker 1 one (2.5 s).
	var first int64
	for _, r := range rows {
		if r.scheduled <= 3e9 {
			first++
		}
	}
	if first != 7 {
		t.Fatalf("fixture: %d requests due by 3 s, want 7", first)
	}
	r, err := Analyze(load(t, rows, closedMeta(4, 4*time.Second)), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Closed; c.FirstWaveRequests != 7 || c.SteadyLateness.N != 5 || c.RampUpS != 4 {
		t.Errorf("closed loop = %+v", *c)
	}
	near(t, "first wave send", r.Closed.FirstWaveSendS, 3)
	if w := strings.Join(r.Warnings, "\n"); !strings.Contains(w, "steady-state schedule lateness p99 and p99.9 from 5 samples") {
		t.Errorf("no small-sample warning for the steady state the decision judges: %q", r.Warnings)
	}
	if got := results.LastWorkerStart(3, 10); got != 6 { // 10·2/3 = 6.67 rounded down, as worker 2's start
		t.Errorf("results.LastWorkerStart(3, 10) = %d", got)
	}
}

// Shards of one closed-loop run sum their workers and take the largest ramp-up.
func TestClosedLoopShardsSum(t *testing.T) {
	dir := t.TempDir()
	rows := burstRun(200_000)
	var paths []string
	for s := range 2 {
		m := closedMeta(32, time.Duration(s)*time.Millisecond)
		m.ShardIndex, m.ShardCount = s, 2
		var part []row
		for i, r := range rows {
			if i%2 == s {
				r.shard = int32(s)
				part = append(part, r)
			}
		}
		p := filepath.Join(dir, []string{"a.parquet", "b.parquet"}[s])
		writeResults(t, p, m, part)
		paths = append(paths, p)
	}
	r, err := AnalyzeFiles(context.Background(), DefaultOptions(), paths...)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Closed; c == nil || c.Concurrency != 64 || c.RampUpS != 0.001 {
		t.Fatalf("closed loop = %+v", c)
	}
}

// perUserRows: three ok requests whose decode speeds are easy by hand, and three left out
// (one token, failed, no output count).
func perUserRows() []row {
	at := func(first, gap int64, n int) []int64 {
		var cs []int64
		for k := range n {
			cs = append(cs, first+int64(k)*gap)
		}
		return cs
	}
	one := okRow(4, 400*ms_, 30*ms_)
	bad := row{id: 5, scheduled: 500 * ms_, sent: p64(500 * ms_), prompt: 100, outTarget: 5, status: "http_error", httpStatus: p32(500), err: new(string)}
	unknown := okRow(6, 600*ms_, at(10*ms_, 10*ms_, 4)...)
	unknown.out = nil
	return []row{
		okRow(1, 0, at(100*ms_, 20*ms_, 5)...),       // 5 tokens over 80 ms: 62.5 tok/s, 1/TPOT 50
		okRow(2, 100*ms_, at(50*ms_, 10*ms_, 10)...), // 10 over 90 ms: 111.1…, 1/TPOT 100
		okRow(3, 200*ms_, at(70*ms_, 40*ms_, 2)...),  // 2 over 40 ms: 50, 1/TPOT 25
		one, bad, unknown,
	}
}

// Per-user speed, by hand: tokens/(E2E−TTFT) = {50, 62.5, 111.1…}; 1/TPOT = {25, 50, 100}.
// Type-7 p10 of three sorted values is x0 + 0.2(x1 − x0), p1 is x0 + 0.02(x1 − x0).
func TestPerUserHandComputed(t *testing.T) {
	r, err := Analyze(load(t, perUserRows(), closedMeta(2, 0)), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	tok, inv := r.PerUser.TokensPerS, r.PerUser.InvTPOT
	if tok.N != 3 || inv.N != 3 {
		t.Fatalf("per-user n = %d, %d, want 3", tok.N, inv.N)
	}
	want := map[string][2]float64{ // tokens/s, 1/TPOT
		"mean": {(50 + 62.5 + 1000.0/9) / 3, (25 + 50 + 100) / 3.0},
		"p50":  {62.5, 50},
		"p10":  {52.5, 30},
		"p1":   {50.25, 25.5},
		"min":  {50, 25},
	}
	got := map[string][2]float64{"mean": {tok.Mean, inv.Mean}, "p50": {tok.P50, inv.P50}, "p10": {tok.P10, inv.P10}, "p1": {tok.P1, inv.P1}, "min": {tok.Min, inv.Min}}
	for k, w := range want {
		near(t, "tokens/s "+k, got[k][0], w[0])
		near(t, "1/TPOT "+k, got[k][1], w[1])
	}

	// Every output carries them.
	var text, js bytes.Buffer
	r.WriteText(&text)
	for _, line := range []string{
		"  output tokens / (E2E - TTFT)           3      74.54      62.50      52.50      50.25      50.00",
		"  1 / TPOT                               3      58.33      50.00      30.00      25.50      25.00",
	} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("text lacks %q:\n%s", line, text.String())
		}
	}
	r.WriteJSON(&js)
	var j struct {
		PerUser map[string]map[string]float64 `json:"per_user"`
	}
	if err := json.Unmarshal(js.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		near(t, "json tokens_per_s "+k, j.PerUser["tokens_per_s"][k], w[0])
		near(t, "json inv_tpot_per_s "+k, j.PerUser["inv_tpot_per_s"][k], w[1])
	}
	dir := t.TempDir()
	if err := WriteParquetDir(dir, r); err != nil {
		t.Fatal(err)
	}
	sum := readSummary(t, filepath.Join(dir, "summary.parquet"), 0)
	for k, w := range want {
		near(t, "parquet per_user_tokens_per_s_"+k, sum["per_user_tokens_per_s_"+k].(float64), w[0])
		near(t, "parquet per_user_inv_tpot_per_s_"+k, sum["per_user_inv_tpot_per_s_"+k].(float64), w[1])
	}
	if sum["per_user_tokens_per_s_n"].(int64) != 3 {
		t.Errorf("per_user_tokens_per_s_n = %v", sum["per_user_tokens_per_s_n"])
	}
	var page bytes.Buffer
	r.WriteHTML(&page)
	if !strings.Contains(page.String(), "<td>1 / TPOT</td><td>3</td><td>58.33</td><td>50.00</td><td>30.00</td><td>25.50</td><td>25.00</td>") {
		t.Errorf("HTML lacks the per-user row")
	}
}

// readSummary reads row k of a summary.parquet into name → value (nil for null).
func readSummary(t *testing.T, path string, k int) map[string]any {
	t.Helper()
	return parquettest.Row(t, path, k)
}

// closedGoldenRun is a deterministic 64-worker closed loop, no ramp-up: a first wave sent
// over 25 ms, a steady state sent within a millisecond of each worker becoming free.
func closedGoldenRun() []row {
	lat := rand.New(rand.NewPCG(5, 9))
	return closedRun(closedSpec{c: 64, perWorker: 24, firstLate: wireSpeedWave(64, 25*ms_),
		steadyLate: func(int) int64 { return int64(lat.ExpFloat64() * 0.15e6) },
		ttft:       func(rng *rand.Rand) int64 { return int64(80e6 + rng.ExpFloat64()*40e6) },
		gap:        func(rng *rand.Rand) int64 { return int64(12e6 + rng.ExpFloat64()*4e6) },
		out:        func(rng *rand.Rand) int32 { return int32(16 + rng.IntN(112)) }, seed: 13})
}

func closedReport(t *testing.T) *Report {
	t.Helper()
	path := filepath.Join(t.TempDir(), "closed.parquet")
	writeResults(t, path, closedMeta(64, 0), closedGoldenRun())
	d, err := Load(context.Background(), decode.LoadOptions{}, path)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.SLO = SLO{TTFT: 200 * time.Millisecond, TPOT: 25 * time.Millisecond}
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// offered finds an offered-load figure or a ratio in a report ("duration" is not one).
var offered = regexp.MustCompile(`(?i)offer|\bratio`)

func TestClosedLoopGolden(t *testing.T) {
	r := closedReport(t)
	if r.Closed == nil || r.Flags.ClientLimited || !(r.Lateness.P99 > 10) {
		t.Fatalf("fixture: closed %v, client-limited %v, whole-run lateness p99 %v ms (want a late first wave and a calm steady state)",
			r.Closed, r.Flags.ClientLimited, r.Lateness.P99)
	}
	var text, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	golden(t, "closed.txt", text.Bytes())
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden(t, "closed.json", js.Bytes())
	// A closed loop's schedule follows completions: no offered load, no ratio, anywhere.
	var page bytes.Buffer
	r.WriteHTML(&page)
	for name, out := range map[string]string{"text": text.String(), "json": js.String(), "html": page.String()} {
		if offered.MatchString(out) {
			t.Errorf("%s of a closed-loop run mentions offered load or a ratio", name)
		}
	}
}

// The closed_loop object's keys, and the summary's closed-loop columns, open loop and closed.
func TestClosedLoopJSONAndParquet(t *testing.T) {
	r := closedReport(t)
	var b bytes.Buffer
	r.WriteJSON(&b)
	var m map[string]json.RawMessage
	json.Unmarshal(b.Bytes(), &m)
	var c map[string]any
	if err := json.Unmarshal(m["closed_loop"], &c); err != nil || c == nil {
		t.Fatalf("closed_loop = %s (%v)", m["closed_loop"], err)
	}
	if got := sortedKeys(c); strings.Join(got, ",") != "client_limited_basis,concurrency,first_wave,ramp_up_s,steady_state" {
		t.Errorf("closed_loop keys = %v", got)
	}
	if got := sortedKeys(c["first_wave"].(map[string]any)); strings.Join(got, ",") != "requests,schedule_lateness_ms,send_s,sent" {
		t.Errorf("closed_loop.first_wave keys = %v", got)
	}
	if got := sortedKeys(c["steady_state"].(map[string]any)); strings.Join(got, ",") != "schedule_lateness_ms,sent" {
		t.Errorf("closed_loop.steady_state keys = %v", got)
	}
	if c["client_limited_basis"] != ClosedBasis || c["concurrency"].(float64) != 64 {
		t.Errorf("closed_loop = %v", c)
	}

	mixed, _ := mixedReport(t)
	dir := t.TempDir()
	if err := WriteParquetDir(dir, r, mixed); err != nil { // one column set for both kinds
		t.Fatal(err)
	}
	sum := readSummary(t, filepath.Join(dir, "summary.parquet"), 0)
	cl := r.Closed
	for k, want := range map[string]any{
		"closed_loop": true, "closed_loop_concurrency": int64(64), "closed_loop_ramp_up_s": 0.0,
		"closed_loop_first_wave_requests": int64(64), "closed_loop_first_wave_send_s": cl.FirstWaveSendS,
		"closed_loop_first_wave_schedule_lateness_ms_p99":   cl.FirstWaveLateness.P99,
		"closed_loop_steady_state_schedule_lateness_ms_p99": cl.SteadyLateness.P99,
		"closed_loop_steady_state_schedule_lateness_ms_n":   cl.SteadyLateness.N,
	} {
		if got := sum[k]; got != want {
			t.Errorf("summary %s = %v, want %v", k, got, want)
		}
	}
	open := readSummary(t, filepath.Join(dir, "summary.parquet"), 1)
	for k, want := range map[string]any{
		"closed_loop": false, "closed_loop_concurrency": int64(0), "closed_loop_ramp_up_s": nil, "closed_loop_first_wave_requests": int64(0),
		"closed_loop_first_wave_send_s": nil, "closed_loop_steady_state_schedule_lateness_ms_p99": nil,
		"per_user_tokens_per_s_p50": mixed.PerUser.TokensPerS.P50,
	} {
		if got := open[k]; got != want {
			t.Errorf("open-loop summary %s = %v, want %v", k, got, want)
		}
	}
}

func sortedKeys(m map[string]any) []string {
	ks := slices.Collect(maps.Keys(m))
	slices.Sort(ks)
	return ks
}

// Every key of per_user and closed_loop, and every summary column they add, is documented
// in docs/metrics.md (in backticks, or as a {…} suffix list of its prefix).
func TestPerUserAndClosedKeysDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	r := closedReport(t)
	var b bytes.Buffer
	r.WriteJSON(&b)
	var m map[string]any
	json.Unmarshal(b.Bytes(), &m)
	var walk func(top, path string, v any)
	walk = func(top, path string, v any) {
		// In backticks, alone or under its object's name (an object by its members' names).
		if path != "" && !bytes.Contains(doc, []byte("`"+path)) && !bytes.Contains(doc, []byte("`"+top+"."+path)) {
			t.Errorf("JSON key %s.%s is not in docs/metrics.md", top, path)
		}
		o, ok := v.(map[string]any)
		if !ok || strings.HasSuffix(path, "_ms") || top == "per_user" && path != "" {
			return // the seven latency figures and the six speeds are documented as sets
		}
		for k, x := range o {
			if path != "" {
				k = path + "." + k
			}
			walk(top, k, x)
		}
	}
	walk("per_user", "", m["per_user"])
	walk("closed_loop", "", m["closed_loop"])
	for _, c := range r.summaryCols() {
		if !strings.HasPrefix(c.name, "per_user") && !strings.HasPrefix(c.name, "closed_loop") {
			continue
		}
		name := c.name
		if i := strings.LastIndex(name, "_ms_"); i > 0 {
			name = name[:i+3] + "_{"
		} else if i := strings.LastIndex(name, "_per_s_"); i > 0 {
			name = name[:i+6] + "_{"
		}
		if !bytes.Contains(doc, []byte("`"+name)) {
			t.Errorf("summary column %s is not in docs/metrics.md (looked for `%s)", c.name, name)
		}
	}
}

// A closed-loop file whose first requests were stamped after the last worker's start (a
// replayer that read the clock for them) has no first wave: every request is judged, and
// the report says why.
func TestClosedLoopNoFirstWave(t *testing.T) {
	rows := burstRun(200_000)
	for i := range rows {
		rows[i].scheduled += 50_000 // 50 µs after each worker became free
	}
	r, err := Analyze(load(t, rows, closedMeta(64, 0)), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Closed; c.FirstWaveRequests != 0 || c.SteadyLateness.N != int64(len(rows)) || !r.Flags.ClientLimited {
		t.Errorf("closed %+v, client-limited %v", *c, r.Flags.ClientLimited)
	}
	if w := strings.Join(r.Warnings, "\n"); !strings.Contains(w, "no first wave") || !strings.Contains(w, "client-limited (closed loop: every request, no first wave found)") {
		t.Errorf("warnings = %q", r.Warnings)
	}
}

// A closed loop with no request after its first wave (fewer requests than workers) is not
// judged, says so, and prints no lateness figure it does not have.
func TestClosedLoopOnlyFirstWave(t *testing.T) {
	rows := burstRun(200_000)[:64]
	r, err := Analyze(load(t, rows, closedMeta(64, 0)), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Closed; c.FirstWaveRequests != 64 || c.SteadyLateness.N != 0 || r.Flags.ClientLimited {
		t.Errorf("closed %+v, client-limited %v", *c, r.Flags.ClientLimited)
	}
	if w := strings.Join(r.Warnings, "\n"); !strings.Contains(w, "closed loop: no request after the first wave of 64: client-limited not judged") {
		t.Errorf("warnings = %q", r.Warnings)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	if !strings.Contains(text.String(), "its schedule lateness p99 - ms") {
		t.Errorf("text:\n%s", text.String())
	}
}
