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
// the run.
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
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
)

// runtime is the state a container runtime keeps: pods and containers by id, with the
// resources the plugin's adjustments and updates gave them.
type runtime struct {
	mu         sync.Mutex
	pods       map[string]*api.PodSandbox
	containers map[string]*api.Container
	updated    int // container updates applied, all paths
}

func (r *runtime) apply(updates []*api.ContainerUpdate) []*api.ContainerUpdate {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range updates {
		c, ok := r.containers[u.ContainerId]
		if !ok || u.Linux == nil || u.Linux.Resources == nil {
			continue
		}
		proto.Merge(resources(c), u.Linux.Resources)
		r.updated++
	}
	return nil
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
}

type report struct {
	Live          int               `json:"live"`
	SynchronizeMs float64           `json:"synchronize_ms"`
	FillMs        float64           `json:"fill_ms"`
	Cases         map[string]result `json:"cases"`
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

	rt := &runtime{pods: map[string]*api.PodSandbox{}, containers: map[string]*api.Container{}}
	synced := make(chan time.Time, 1)
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		pods, ctrs := rt.snapshot()
		updates, err := cb(ctx, pods, ctrs)
		if err != nil {
			return err
		}
		rt.apply(updates)
		synced <- time.Now()
		return nil
	}
	updateFn := func(_ context.Context, u []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
		return rt.apply(u), nil
	}
	dir := filepath.Dir(*socket)
	nri, err := adaptation.New("go-side-harness", "0", syncFn, updateFn,
		adaptation.WithSocketPath(*socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		return err
	}
	if err := nri.Start(); err != nil {
		return err
	}
	defer nri.Stop()

	out, err := os.Create(*pluginLog)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	var syncedAt time.Time
	select {
	case syncedAt = <-synced:
	case err := <-exited:
		return fmt.Errorf("plugin exited before it synchronized: %v (see %s)", err, *pluginLog)
	case <-time.After(120 * time.Second):
		return fmt.Errorf("plugin did not register within 120 s (see %s)", *pluginLog)
	}
	// The adaptation adds the plugin to its list just after synchronizing it.
	time.Sleep(100 * time.Millisecond)

	ctx := context.Background()
	rep := report{Live: len(fill), SynchronizeMs: float64(syncedAt.Sub(started).Microseconds()) / 1e3}
	fillStart := time.Now()
	for _, req := range fill {
		if err := rt.runPod(ctx, nri, req.Pod); err != nil {
			return err
		}
		if _, err := rt.create(ctx, nri, req); err != nil {
			return err
		}
		if err := rt.start(ctx, nri, req); err != nil {
			return err
		}
	}
	rep.FillMs = float64(time.Since(fillStart).Microseconds()) / 1e3
	for _, req := range probes {
		if err := rt.runPod(ctx, nri, req.Pod); err != nil {
			return err
		}
	}

	times := make([][]time.Duration, len(probes))
	updates := make([][]int, len(probes))
	adjusted := make([]int, len(probes))
	for n := 0; n < *warmup+*samples*len(probes); n++ {
		k := n % len(probes)
		req := proto.Clone(probes[k]).(*api.CreateContainerRequest)
		t0 := time.Now()
		rpl, err := nri.CreateContainer(ctx, req)
		took := time.Since(t0)
		if err != nil {
			return fmt.Errorf("CreateContainer %s: %w", req.Container.Id, err)
		}
		rt.created(req.Container, rpl)
		if n >= *warmup {
			times[k] = append(times[k], took)
			updates[k] = append(updates[k], len(rpl.Update))
			if adjusts(rpl.Adjust) {
				adjusted[k]++
			}
		}
		if err := rt.stopRemove(ctx, nri, req); err != nil {
			return err
		}
		select {
		case err := <-exited:
			return fmt.Errorf("plugin exited during the run: %v (see %s)", err, *pluginLog)
		default:
		}
	}
	rep.Cases = map[string]result{}
	for k, req := range probes {
		sort.Slice(times[k], func(i, j int) bool { return times[k][i] < times[k][j] })
		sort.Ints(updates[k])
		rep.Cases[req.Container.Id] = result{
			P50ms: quantile(times[k], 0.50), P99ms: quantile(times[k], 0.99),
			Samples: len(times[k]), Adjusted: adjusted[k], Updates: updates[k][len(updates[k])/2],
		}
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

func adjusts(a *api.ContainerAdjustment) bool {
	return a != nil && a.Linux != nil && a.Linux.Resources != nil && a.Linux.Resources.Cpu != nil &&
		(a.Linux.Resources.Cpu.Cpus != "" || a.Linux.Resources.Cpu.Mems != "")
}

func (r *runtime) runPod(ctx context.Context, nri *adaptation.Adaptation, pod *api.PodSandbox) error {
	r.mu.Lock()
	r.pods[pod.Id] = pod
	r.mu.Unlock()
	if err := nri.RunPodSandbox(ctx, &api.StateChangeEvent{Pod: pod}); err != nil {
		return fmt.Errorf("RunPodSandbox %s: %w", pod.Id, err)
	}
	return nil
}

func (r *runtime) create(ctx context.Context, nri *adaptation.Adaptation, req *api.CreateContainerRequest) (*api.CreateContainerResponse, error) {
	rpl, err := nri.CreateContainer(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("CreateContainer %s: %w", req.Container.Id, err)
	}
	r.created(req.Container, rpl)
	return rpl, nil
}

// created records the container with its adjustment, then applies the updates to others.
func (r *runtime) created(c *api.Container, rpl *api.CreateContainerResponse) {
	if a := rpl.Adjust; a != nil && a.Linux != nil && a.Linux.Resources != nil {
		proto.Merge(resources(c), a.Linux.Resources)
	}
	r.mu.Lock()
	r.containers[c.Id] = c
	r.mu.Unlock()
	r.apply(rpl.Update)
}

func (r *runtime) start(ctx context.Context, nri *adaptation.Adaptation, req *api.CreateContainerRequest) error {
	for _, step := range []func(context.Context, *api.StateChangeEvent) error{
		nri.PostCreateContainer, nri.StartContainer, nri.PostStartContainer,
	} {
		evt := &api.StateChangeEvent{Pod: req.Pod, Container: req.Container}
		if err := step(ctx, evt); err != nil {
			return fmt.Errorf("starting %s: %w", req.Container.Id, err)
		}
	}
	return nil
}

func (r *runtime) stopRemove(ctx context.Context, nri *adaptation.Adaptation, req *api.CreateContainerRequest) error {
	rpl, err := nri.StopContainer(ctx, &api.StopContainerRequest{Pod: req.Pod, Container: req.Container})
	if err != nil {
		return fmt.Errorf("StopContainer %s: %w", req.Container.Id, err)
	}
	r.apply(rpl.Update)
	r.mu.Lock()
	delete(r.containers, req.Container.Id)
	r.mu.Unlock()
	if err := nri.RemoveContainer(ctx, &api.StateChangeEvent{Pod: req.Pod, Container: req.Container}); err != nil {
		return fmt.Errorf("RemoveContainer %s: %w", req.Container.Id, err)
	}
	return nil
}

