//go:build nri012

// Command podresize is the runtime side of an in-place pod resize as containerd drives NRI:
// containerd/nri's pkg/adaptation (0.12 or later, which relays UpdatePodSandbox) serving one
// external plugin on a private socket.
//
// It starts the adaptation and the plugin command given after the flags, waits for the plugin to
// synchronize, then plays one pod: RunPodSandbox, CreateContainer (applying the adjustment and
// updates as a runtime does), PostCreateContainer, StartContainer, PostStartContainer, and
// UpdatePodSandbox with the pod's new resources. The plugin's UpdateContainers are applied as
// they come. It prints one JSON object: the container's cpuset after its creation and after the
// resize (once an update changed it, or after -wait), whether the resize event failed, and the
// adaptation's error if any.
//
// -request holds two length-prefixed (4 bytes, big endian) serialized CreateContainerRequest
// messages: the first is the pod and container to create, the second's pod is the same pod with
// its new resources (PodSandbox.linux.pod_resources), which UpdatePodSandbox carries as
// linux_resources.
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
	"sync"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
)

type result struct {
	CpusCreated string `json:"cpus_created"`
	CpusResized string `json:"cpus_resized"`
	ResizeError string `json:"resize_error"`
}

// container is the one container's resources, kept as a runtime keeps them.
type container struct {
	mu    sync.Mutex
	id    string
	res   *api.LinuxResources
	moved chan struct{}
}

func (c *container) apply(updates []*api.ContainerUpdate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, u := range updates {
		if u.ContainerId != c.id || u.Linux == nil || u.Linux.Resources == nil {
			continue
		}
		before := c.res.GetCpu().GetCpus()
		proto.Merge(c.res, u.Linux.Resources)
		if c.res.GetCpu().GetCpus() != before {
			select {
			case c.moved <- struct{}{}:
			default:
			}
		}
	}
}

func (c *container) cpus() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.res.GetCpu().GetCpus()
}

func readRequests(path string) ([]*api.CreateContainerRequest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*api.CreateContainerRequest
	for len(data) >= 4 {
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

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "podresize: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	socket := flag.String("socket", "", "NRI socket to listen on (private)")
	requests := flag.String("request", "", "the create request and the resized pod")
	pluginLog := flag.String("plugin-log", os.DevNull, "file for the plugin's output")
	wait := flag.Duration("wait", 10*time.Second, "how long to wait for the plugin's update")
	flag.Parse()
	if *socket == "" || *requests == "" || flag.NArg() == 0 {
		return errors.New("usage: podresize -socket PATH -request FILE -- PLUGIN ARGS...")
	}
	logrus.SetLevel(logrus.WarnLevel)
	reqs, err := readRequests(*requests)
	if err != nil {
		return err
	}
	if len(reqs) != 2 {
		return fmt.Errorf("%s: %d requests, want 2", *requests, len(reqs))
	}
	create, resized := reqs[0], reqs[1].Pod

	ctr := &container{id: create.Container.Id, res: &api.LinuxResources{}, moved: make(chan struct{}, 1)}
	synced := make(chan struct{}, 1)
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		if _, err := cb(ctx, nil, nil); err != nil {
			return err
		}
		synced <- struct{}{}
		return nil
	}
	updateFn := func(_ context.Context, u []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
		ctr.apply(u)
		return nil, nil
	}
	dir := filepath.Dir(*socket)
	// Named as containerd names itself, with the first release that relays UpdatePodSandbox: a
	// GOPATH build carries no module version, so the adaptation reports its NRI version as
	// unknown and the plugin judges the events it may ask for by the runtime's name and version.
	nri, err := adaptation.New("containerd", "v2.2.0", syncFn, updateFn,
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
	// Start synchronizes the pre-installed plugins (there are none): that report is not ours.
	select {
	case <-synced:
	default:
	}

	out, err := os.OpenFile(*pluginLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	argv := flag.Args()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	select {
	case <-synced:
		time.Sleep(100 * time.Millisecond) // the adaptation lists the plugin just after syncing it
	case err := <-done:
		return fmt.Errorf("plugin exited before it synchronized: %v (see %s)", err, *pluginLog)
	case <-time.After(120 * time.Second):
		return fmt.Errorf("plugin did not register within 120 s (see %s)", *pluginLog)
	}

	ctx := context.Background()
	pod, c := create.Pod, create.Container
	if err := nri.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}); err != nil {
		return fmt.Errorf("RunPodSandbox: %w", err)
	}
	rpl, err := nri.CreateContainer(ctx, create)
	if err != nil {
		return fmt.Errorf("CreateContainer: %w", err)
	}
	if a := rpl.Adjust; a != nil && a.Linux != nil && a.Linux.Resources != nil {
		proto.Merge(ctr.res, a.Linux.Resources)
	}
	ctr.apply(rpl.Update)
	if err := nri.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: c}); err != nil {
		return err
	}
	if err := nri.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: c}); err != nil {
		return err
	}
	if err := nri.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: c}); err != nil {
		return err
	}
	res := result{CpusCreated: ctr.cpus()}
	_, err = nri.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{
		Pod:            resized,
		LinuxResources: resized.GetLinux().GetPodResources(),
	})
	if err != nil {
		res.ResizeError = err.Error()
	} else {
		select {
		case <-ctr.moved:
		case <-time.After(*wait):
		}
	}
	res.CpusResized = ctr.cpus()
	return json.NewEncoder(os.Stdout).Encode(res)
}
