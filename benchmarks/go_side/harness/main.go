// Command harness is the runtime side of the Go-side benchmark: containerd/nri's pkg/adaptation,
// as containerd embeds it, serving one external plugin on a private socket.
//
// It starts the adaptation, starts the plugin command given after the flags, waits for the
// plugin to register and synchronize, then creates the fill containers (RunPodSandbox,
// CreateContainer, PostCreateContainer, StartContainer, PostStartContainer, applying the
// adjustments and updates as a runtime does) and times adaptation.CreateContainer of the probe
// containers in turn. Each probe is stopped and removed again after its sample (not timed), so
// every sample sees the same fill. It prints one JSON object with p50/p99 per probe, or exits
// non-zero with the adaptation's error: an update or adjustment the adaptation refuses fails
// the run. With -record it also writes the plugin's last reply to each probe's create and stop
// (JSON, protobuf's JSON mapping), which the no-op plugin replays with -replies.
//
// The lifecycle events' request types differ between NRI releases: events_nri06.go is built by
// default (containerd/nri 0.6.x, Debian's packages), events_nri012.go with the nri012 tag.
//
// The requests are read from files of length-prefixed (4 bytes, big endian) serialized
// CreateContainerRequest messages, written by benchmarks/go_side.py from benchmarks/workload.py.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// runtime is the state a container runtime keeps: pods and containers by id, with the
// resources the plugin's adjustments and updates gave them.
type runtime struct {
	mu         sync.Mutex
	pods       map[string]*api.PodSandbox
	containers map[string]*api.Container
	lastUpdate time.Time // when the plugin's last updates apart from a reply came
	cgroups    string    // a cpuset tree of plain files, one directory per container; "": none
}

// applied writes the container's cpusets into its cgroup directory, as runc does when the
// runtime creates or updates it: a plugin reading or writing the cgroups meets what a runtime
// leaves there, not the files as the benchmark made them.
func (r *runtime) applied(c *api.Container) {
	if r.cgroups == "" || c.Linux == nil || c.Linux.Resources == nil || c.Linux.Resources.Cpu == nil {
		return
	}
	cpu := c.Linux.Resources.Cpu
	for file, value := range map[string]string{"cpuset.cpus": cpu.Cpus, "cpuset.mems": cpu.Mems} {
		if value != "" {
			_ = os.WriteFile(filepath.Join(r.cgroups, c.Id, file), []byte(value+"\n"), 0o644)
		}
	}
}

// apply merges updates into the containers they name; unknown ids are skipped, as containerd
// does.
func (r *runtime) apply(updates []*api.ContainerUpdate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range updates {
		c, ok := r.containers[u.ContainerId]
		if !ok || u.Linux == nil || u.Linux.Resources == nil {
			continue
		}
		proto.Merge(resources(c), u.Linux.Resources)
		r.applied(c)
	}
}

func resources(c *api.Container) *api.LinuxResources {
	if c.Linux == nil {
		c.Linux = &api.LinuxContainer{}
	}
	if c.Linux.Resources == nil {
		c.Linux.Resources = &api.LinuxResources{}
	}
	return c.Linux.Resources
}

// settle waits until no updates apart from a reply came for `quiet` (at most `limit`); how
// long it waited.
func (r *runtime) settle(quiet, limit time.Duration) time.Duration {
	started := time.Now()
	for time.Since(started) < limit {
		r.mu.Lock()
		since := time.Since(r.lastUpdate)
		r.mu.Unlock()
		if since >= quiet {
			break
		}
		time.Sleep(quiet - since)
	}
	return time.Since(started)
}

func (r *runtime) snapshot() ([]*api.PodSandbox, []*api.Container) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pods := make([]*api.PodSandbox, 0, len(r.pods))
	for _, p := range r.pods {
		pods = append(pods, p)
	}
	ctrs := make([]*api.Container, 0, len(r.containers))
	for _, c := range r.containers {
		ctrs = append(ctrs, c)
	}
	return pods, ctrs
}

func readRequests(path string) ([]*api.CreateContainerRequest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*api.CreateContainerRequest
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, fmt.Errorf("%s: truncated length", path)
		}
		n := binary.BigEndian.Uint32(data)
		if uint32(len(data)-4) < n {
			return nil, fmt.Errorf("%s: truncated message", path)
		}
		req := &api.CreateContainerRequest{}
		if err := proto.Unmarshal(data[4:4+n], req); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, req)
		data = data[4+n:]
	}
	return out, nil
}

// quantile by nearest rank, as benchmarks/latency.py takes it.
func quantile(sorted []time.Duration, q float64) float64 {
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return float64(sorted[i].Nanoseconds()) / 1e6
}

type result struct {
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	Samples  int     `json:"samples"`
	Adjusted int     `json:"adjusted"` // replies carrying an adjustment of the new container
	Updates  int     `json:"updates"`  // median updates of other containers per reply
	AllocKB  float64 `json:"alloc_kb"` // mean heap allocated by this process during a create
}

// collected is the Go garbage collection of this process (the runtime side) over the probe
// loop: every create and stop of a probe, the warm-up included.
type collected struct {
	Creates int     `json:"creates"`
	Cycles  uint64  `json:"cycles"`
	CPUms   float64 `json:"cpu_ms"` // CPU the collection took from the program (not idle time)
}

// restarted is a plugin restart with the fill running: how long the fill's re-pins sent after
// the replies took to arrive (the restart waits for them), process start to synchronized, and
// how many containers the updates of its Synchronize reply touched.
type restarted struct {
	SettledMs     float64 `json:"settled_ms"`
	SynchronizeMs float64 `json:"synchronize_ms"`
	Moved         int     `json:"moved"`
}

type report struct {
	Live          int               `json:"live"`
	SynchronizeMs float64           `json:"synchronize_ms"` // process start to synchronized
	FillMs        float64           `json:"fill_ms"`
	Restart       *restarted        `json:"restart,omitempty"`
	Cases         map[string]result `json:"cases"`
	GC            collected         `json:"gc"`
	PeakRSSKB     int64             `json:"plugin_peak_rss_kb"` // of its processes, the largest
}

// gcMetrics are read through runtime/metrics, which does not stop the world: the allocation,
// the cycles, then the Go runtime's estimates of the CPU time its collector took from the
// program (mark assists, dedicated mark workers, pauses; marking on idle CPUs is left out).
var gcMetrics = []metrics.Sample{
	{Name: "/gc/heap/allocs:bytes"},
	{Name: "/gc/cycles/total:gc-cycles"},
	{Name: "/cpu/classes/gc/mark/assist:cpu-seconds"},
	{Name: "/cpu/classes/gc/mark/dedicated:cpu-seconds"},
	{Name: "/cpu/classes/gc/pause:cpu-seconds"},
}

// allocated is the heap this process has allocated so far, counted a span (a few KB) at a
// time when its allocation cache is refilled: only a mean over many creates says much.
func allocated() uint64 {
	metrics.Read(gcMetrics[:1])
	return gcMetrics[0].Value.Uint64()
}

func gcSoFar() (uint64, float64) {
	metrics.Read(gcMetrics[1:])
	cpu := 0.0
	for _, m := range gcMetrics[2:] {
		cpu += m.Value.Float64()
	}
	return gcMetrics[1].Value.Uint64(), cpu
}

// nriVersion is the containerd/nri release built against (build.sh sets it), for Configure.
var nriVersion string

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// process is the plugin's process, started again for a restart.
type process struct {
	argv []string
	out  *os.File
	log  string
	cmd  *exec.Cmd
	done chan error
	peak int64 // the largest resident set of the processes that ended, KB
}

// start runs the plugin and waits until the adaptation synchronized it; returns the time from
// process start to synchronized and how many containers its Synchronize reply updated.
func (p *process) start(synced <-chan int) (time.Duration, int, error) {
	p.cmd = exec.Command(p.argv[0], p.argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	started := time.Now()
	if err := p.cmd.Start(); err != nil {
		return 0, 0, err
	}
	p.done = make(chan error, 1)
	go func(cmd *exec.Cmd, done chan<- error) { done <- cmd.Wait() }(p.cmd, p.done)
	select {
	case n := <-synced:
		// The adaptation adds the plugin to its list just after synchronizing it.
		took := time.Since(started)
		time.Sleep(100 * time.Millisecond)
		return took, n, nil
	case err := <-p.done:
		p.cmd = nil
		return 0, 0, fmt.Errorf("plugin exited before it synchronized: %v (see %s)", err, p.log)
	case <-time.After(120 * time.Second):
		return 0, 0, fmt.Errorf("plugin did not register within 120 s (see %s)", p.log)
	}
}

func (p *process) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// stop ends the plugin with SIGTERM, as a DaemonSet pod is stopped.
func (p *process) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if usage, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && usage.Maxrss > p.peak {
		p.peak = usage.Maxrss // wait4's rusage: the child's own peak, in KB on Linux
	}
	p.cmd = nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "harness: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	socket := flag.String("socket", "", "NRI socket to listen on (private)")
	fillFile := flag.String("fill", "", "fill requests (length-prefixed CreateContainerRequest)")
	probeFile := flag.String("probes", "", "probe requests, same format")
	samples := flag.Int("samples", 300, "timed creates per probe")
	warmup := flag.Int("warmup", 50, "untimed creates before timing")
	pluginLog := flag.String("plugin-log", os.DevNull, "file for the plugin's output")
	restart := flag.Bool("restart", false, "after the fill, restart the plugin and time its "+
		"registration and Synchronize with every fill container running")
	record := flag.String("record", "", "file for the plugin's last replies to the probes")
	cgroups := flag.String("cgroups", "", "cpuset tree of plain files the runtime writes each "+
		"container's cpusets into, as runc does (one directory per container id)")
	flag.Parse()
	if *socket == "" || *probeFile == "" || flag.NArg() == 0 {
		return errors.New("usage: harness -socket PATH -probes FILE [-fill FILE] -- PLUGIN ARGS...")
	}
	logrus.SetLevel(logrus.WarnLevel)

	fill, probes := []*api.CreateContainerRequest{}, []*api.CreateContainerRequest{}
	var err error
	if *fillFile != "" {
		if fill, err = readRequests(*fillFile); err != nil {
			return err
		}
	}
	if probes, err = readRequests(*probeFile); err != nil {
		return err
	}

	rt := &runtime{
		pods: map[string]*api.PodSandbox{}, containers: map[string]*api.Container{}, cgroups: *cgroups,
	}
	synced := make(chan int, 1)
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		pods, ctrs := rt.snapshot()
		updates, err := cb(ctx, pods, ctrs)
		if err != nil {
			return err
		}
		rt.apply(updates)
		moved := map[string]bool{}
		for _, u := range updates {
			moved[u.ContainerId] = true
		}
		synced <- len(moved)
		return nil
	}
	updateFn := func(_ context.Context, u []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
		rt.apply(u)
		rt.mu.Lock()
		rt.lastUpdate = time.Now()
		rt.mu.Unlock()
		return nil, nil // none failed
	}
	dir := filepath.Dir(*socket)
	nri, err := adaptation.New("go-side-harness", "0", syncFn, updateFn,
		adaptation.WithSocketPath(*socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		return err
	}
	reportVersion(nri, nriVersion)
	if err := nri.Start(); err != nil {
		return err
	}
	defer nri.Stop()
	// Since 0.12 Start synchronizes the pre-installed plugins too (there are none here): that
	// report is not our plugin's.
	select {
	case <-synced:
	default:
	}

	out, err := os.OpenFile(*pluginLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	p := &process{argv: flag.Args(), out: out, log: *pluginLog}
	took, _, err := p.start(synced)
	if err != nil {
		return err
	}
	defer p.stop()

	ctx := context.Background()
	rep := report{Live: len(fill), SynchronizeMs: ms(took)}
	fillStart := time.Now()
	for _, req := range fill {
		if err := rt.runPod(ctx, nri, req.Pod); err != nil {
			return err
		}
		if err := rt.create(ctx, nri, req); err != nil {
			return err
		}
		if err := rt.start(ctx, nri, req); err != nil {
			return err
		}
	}
	rep.FillMs = ms(time.Since(fillStart))
	if *restart {
		// Re-pins still on their way when the plugin stops are lost with it and come in its
		// Synchronize reply instead, which would count them as moved by the restart. A plugin
		// may hold them back until the events stop (ours, for re-pins its cgroup writes made
		// already, after their writes land and a grow delay), so the quiet is counted from the
		// fill's end too, not from the last update, and is longer than that hold.
		rt.mu.Lock()
		rt.lastUpdate = time.Now()
		rt.mu.Unlock()
		settled := rt.settle(3*time.Second, 120*time.Second)
		p.stop()
		took, moved, err := p.start(synced)
		if err != nil {
			return fmt.Errorf("restarting the plugin: %w", err)
		}
		rep.Restart = &restarted{SettledMs: ms(settled), SynchronizeMs: ms(took), Moved: moved}
	}
	for _, req := range probes {
		if err := rt.runPod(ctx, nri, req.Pod); err != nil {
			return err
		}
	}

	times := make([][]time.Duration, len(probes))
	updates := make([][]int, len(probes))
	adjusted := make([]int, len(probes))
	replies := make([]recorded, len(probes))
	allocs := make([]uint64, len(probes))
	creates := *warmup + *samples*len(probes)
	cycles, gcCPU := gcSoFar()
	for n := 0; n < creates; n++ {
		k := n % len(probes)
		req := proto.Clone(probes[k]).(*api.CreateContainerRequest)
		before := allocated()
		t0 := time.Now()
		rpl, err := nri.CreateContainer(ctx, req)
		took := time.Since(t0)
		alloc := allocated() - before
		if err != nil {
			return fmt.Errorf("CreateContainer %s: %w", req.Container.Id, err)
		}
		rt.created(req.Container, rpl)
		replies[k].Create = rpl
		if n >= *warmup {
			times[k] = append(times[k], took)
			allocs[k] += alloc
			updates[k] = append(updates[k], len(rpl.Update))
			if adjusts(rpl.Adjust) {
				adjusted[k]++
			}
		}
		if replies[k].Stop, err = rt.stopRemove(ctx, nri, req); err != nil {
			return err
		}
		if p.exited() {
			return fmt.Errorf("plugin exited during the run (see %s)", *pluginLog)
		}
	}
	cyclesAfter, gcCPUAfter := gcSoFar()
	rep.GC = collected{Creates: creates, Cycles: cyclesAfter - cycles, CPUms: (gcCPUAfter - gcCPU) * 1e3}
	rep.Cases = map[string]result{}
	for k, req := range probes {
		sort.Slice(times[k], func(i, j int) bool { return times[k][i] < times[k][j] })
		sort.Ints(updates[k])
		rep.Cases[req.Container.Id] = result{
			P50ms: quantile(times[k], 0.50), P99ms: quantile(times[k], 0.99),
			Samples: len(times[k]), Adjusted: adjusted[k], Updates: updates[k][len(updates[k])/2],
			AllocKB: float64(allocs[k]) / float64(len(times[k])) / 1024,
		}
	}
	if *record != "" {
		if err := writeReplies(*record, probes, replies); err != nil {
			return err
		}
	}
	p.stop()
	rep.PeakRSSKB = p.peak
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// recorded is what the adaptation made of the plugin's replies to one probe's create and stop.
type recorded struct {
	Create *api.CreateContainerResponse
	Stop   *api.StopContainerResponse
}

// writeReplies writes {probe id: {"create": reply, "stop": reply}}. With one plugin the
// adaptation's response holds that plugin's reply field for field, plus the empty defaults it
// starts every result with; those are dropped so a replay sends what the plugin sent.
func writeReplies(path string, probes []*api.CreateContainerRequest, replies []recorded) error {
	out := map[string]map[string]json.RawMessage{}
	for k, req := range probes {
		create := proto.Clone(replies[k].Create).(*api.CreateContainerResponse)
		stop := proto.Clone(replies[k].Stop).(*api.StopContainerResponse)
		if a := create.Adjust; a != nil {
			if proto.Size(a.Hooks) == 0 {
				a.Hooks = nil
			}
			if a.Linux != nil {
				a.Linux.Resources = trimResources(a.Linux.Resources)
				dropEmpty(a.Linux.ProtoReflect())
				if proto.Size(a.Linux) == 0 {
					a.Linux = nil
				}
			}
		}
		for _, updates := range [][]*api.ContainerUpdate{create.Update, stop.Update} {
			for _, u := range updates {
				if u.Linux != nil {
					u.Linux.Resources = trimResources(u.Linux.Resources)
				}
			}
		}
		c, err := protojson.Marshal(create)
		if err != nil {
			return err
		}
		s, err := protojson.Marshal(stop)
		if err != nil {
			return err
		}
		out[req.Container.Id] = map[string]json.RawMessage{"create": c, "stop": s}
	}
	data, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// dropEmpty clears the empty messages set in m's fields (0.12 adds an empty RDT message).
func dropEmpty(m protoreflect.Message) {
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if f.Message() != nil && !f.IsList() && !f.IsMap() && proto.Size(v.Message().Interface()) == 0 {
			m.Clear(f)
		}
		return true
	})
}

// trimResources drops the empty memory and CPU messages the adaptation adds; nil if nothing
// is left.
func trimResources(r *api.LinuxResources) *api.LinuxResources {
	if r == nil {
		return nil
	}
	if proto.Size(r.Memory) == 0 {
		r.Memory = nil
	}
	if proto.Size(r.Cpu) == 0 {
		r.Cpu = nil
	}
	if proto.Size(r) == 0 {
		return nil
	}
	return r
}

func adjusts(a *api.ContainerAdjustment) bool {
	return a != nil && a.Linux != nil && a.Linux.Resources != nil && a.Linux.Resources.Cpu != nil &&
		(a.Linux.Resources.Cpu.Cpus != "" || a.Linux.Resources.Cpu.Mems != "")
}

func (r *runtime) runPod(ctx context.Context, nri *adaptation.Adaptation, pod *api.PodSandbox) error {
	r.mu.Lock()
	r.pods[pod.Id] = pod
	r.mu.Unlock()
	if err := runPodSandbox(ctx, nri, pod); err != nil {
		return fmt.Errorf("RunPodSandbox %s: %w", pod.Id, err)
	}
	return nil
}

func (r *runtime) create(ctx context.Context, nri *adaptation.Adaptation, req *api.CreateContainerRequest) error {
	rpl, err := nri.CreateContainer(ctx, req)
	if err != nil {
		return fmt.Errorf("CreateContainer %s: %w", req.Container.Id, err)
	}
	r.created(req.Container, rpl)
	return nil
}

// created records the container with its adjustment, then applies the updates to others.
func (r *runtime) created(c *api.Container, rpl *api.CreateContainerResponse) {
	if a := rpl.Adjust; a != nil && a.Linux != nil && a.Linux.Resources != nil {
		proto.Merge(resources(c), a.Linux.Resources)
	}
	r.mu.Lock()
	r.containers[c.Id] = c
	r.applied(c)
	r.mu.Unlock()
	r.apply(rpl.Update)
}

func (r *runtime) start(ctx context.Context, nri *adaptation.Adaptation, req *api.CreateContainerRequest) error {
	for _, step := range startSteps(nri) {
		if err := step(ctx, req.Pod, req.Container); err != nil {
			return fmt.Errorf("starting %s: %w", req.Container.Id, err)
		}
	}
	return nil
}

func (r *runtime) stopRemove(ctx context.Context, nri *adaptation.Adaptation, req *api.CreateContainerRequest) (*api.StopContainerResponse, error) {
	rpl, err := nri.StopContainer(ctx, &api.StopContainerRequest{Pod: req.Pod, Container: req.Container})
	if err != nil {
		return nil, fmt.Errorf("StopContainer %s: %w", req.Container.Id, err)
	}
	r.apply(rpl.Update)
	r.mu.Lock()
	delete(r.containers, req.Container.Id)
	r.mu.Unlock()
	if err := removeContainer(ctx, nri, req.Pod, req.Container); err != nil {
		return nil, fmt.Errorf("RemoveContainer %s: %w", req.Container.Id, err)
	}
	return rpl, nil
}
