// Command noop is the protocol floor for the Go-side benchmark: NRI's template plugin with empty
// handlers. It is built on containerd/nri's pkg/stub, subscribes to every pod and container
// event the template handles, and answers each with no adjustment and no update.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
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

func main() {
	socket := flag.String("socket", api.DefaultSocketPath, "the runtime's NRI socket")
	flag.Parse()
	s, err := stub.New(plugin{}, stub.WithPluginName("noop"), stub.WithPluginIdx("50"),
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
