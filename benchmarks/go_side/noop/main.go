// Command noop is the protocol floor for the Go-side benchmark: NRI's template plugin with empty
// handlers. It is built on containerd/nri's pkg/stub, subscribes to every pod and container
// event the template handles, and answers each with no adjustment and no update.
//
// With -replies FILE (written by the harness's -record) it answers the create and stop of each
// container named there with the reply recorded for it, decoded once at start: a placement
// plugin's answer at no cost of its own, so the runtime side's share of handling the
// adjustment and updates shows apart from the plugin's. Other containers get no answer.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"google.golang.org/protobuf/encoding/protojson"
)

type plugin struct{}

func (plugin) Configure(context.Context, string, string, string) (stub.EventMask, error) {
	return 0, nil // 0: every event a handler below exists for, as the template does by default
}

func (plugin) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (plugin) Shutdown(context.Context) {}

func (plugin) RunPodSandbox(context.Context, *api.PodSandbox) error    { return nil }
func (plugin) StopPodSandbox(context.Context, *api.PodSandbox) error   { return nil }
func (plugin) RemovePodSandbox(context.Context, *api.PodSandbox) error { return nil }

func (plugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

func (plugin) PostCreateContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

func (plugin) StartContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

func (plugin) PostStartContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

func (plugin) UpdateContainer(context.Context, *api.PodSandbox, *api.Container, *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (plugin) PostUpdateContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

func (plugin) StopContainer(context.Context, *api.PodSandbox, *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (plugin) RemoveContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

// pinned is the template with fixed answers for the containers it has replies for.
type pinned struct {
	plugin
	create map[string]*api.CreateContainerResponse
	stop   map[string]*api.StopContainerResponse
}

func (p pinned) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if r, ok := p.create[c.Id]; ok {
		return r.Adjust, r.Update, nil
	}
	return nil, nil, nil
}

func (p pinned) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	if r, ok := p.stop[c.Id]; ok {
		return r.Update, nil
	}
	return nil, nil
}

// readReplies reads {container id: {"create": reply, "stop": reply}}.
func readReplies(path string) (pinned, error) {
	p := pinned{create: map[string]*api.CreateContainerResponse{},
		stop: map[string]*api.StopContainerResponse{}}
	data, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	var replies map[string]struct{ Create, Stop json.RawMessage }
	if err := json.Unmarshal(data, &replies); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	for id, r := range replies {
		p.create[id], p.stop[id] = &api.CreateContainerResponse{}, &api.StopContainerResponse{}
		if err := protojson.Unmarshal(r.Create, p.create[id]); err != nil {
			return p, fmt.Errorf("%s: %s: %w", path, id, err)
		}
		if err := protojson.Unmarshal(r.Stop, p.stop[id]); err != nil {
			return p, fmt.Errorf("%s: %s: %w", path, id, err)
		}
	}
	return p, nil
}

func main() {
	socket := flag.String("socket", api.DefaultSocketPath, "the runtime's NRI socket")
	replies := flag.String("replies", "", "answer the containers in this file with their replies")
	flag.Parse()
	var handlers interface{} = plugin{}
	name := "noop"
	if *replies != "" {
		p, err := readReplies(*replies)
		if err != nil {
			fmt.Fprintf(os.Stderr, "noop: %v\n", err)
			os.Exit(1)
		}
		handlers, name = p, "go-pin"
	}
	s, err := stub.New(handlers, stub.WithPluginName(name), stub.WithPluginIdx("50"),
		stub.WithSocketPath(*socket), stub.WithOnClose(func() { os.Exit(0) }))
	if err != nil {
		fmt.Fprintf(os.Stderr, "noop: %v\n", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "noop: %v\n", err)
		os.Exit(1)
	}
}
