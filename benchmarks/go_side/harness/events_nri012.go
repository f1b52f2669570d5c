//go:build nri012

// Lifecycle events as containerd/nri 0.12.x takes them: a request type per event.
package main

import (
	"context"
	"reflect"
	"unsafe"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// reportVersion makes the adaptation tell plugins, in Configure, the containerd/nri release it
// was built from, as containerd does. It reads its own version from the Go module's build
// information, which a GOPATH build has none of: it would say 0.0.0-unknown, and a plugin
// deciding from it (ours' `auto` transport) would act as on a runtime too old to say.
func reportVersion(nri *adaptation.Adaptation, version string) {
	if version == "" {
		return
	}
	field := reflect.ValueOf(nri).Elem().FieldByName("nriVersion")
	if !field.IsValid() || field.Kind() != reflect.String {
		panic("containerd/nri's Adaptation keeps its version elsewhere: update reportVersion")
	}
	reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem().SetString(version)
}

type step func(context.Context, *api.PodSandbox, *api.Container) error

func runPodSandbox(ctx context.Context, nri *adaptation.Adaptation, pod *api.PodSandbox) error {
	return nri.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})
}

// startSteps are the events after a create: PostCreateContainer, StartContainer, PostStartContainer.
func startSteps(nri *adaptation.Adaptation) []step {
	return []step{
		func(ctx context.Context, p *api.PodSandbox, c *api.Container) error {
			return nri.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: p, Container: c})
		},
		func(ctx context.Context, p *api.PodSandbox, c *api.Container) error {
			return nri.StartContainer(ctx, &api.StartContainerRequest{Pod: p, Container: c})
		},
		func(ctx context.Context, p *api.PodSandbox, c *api.Container) error {
			return nri.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: p, Container: c})
		},
	}
}

func removeContainer(ctx context.Context, nri *adaptation.Adaptation, p *api.PodSandbox, c *api.Container) error {
	return nri.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: p, Container: c})
}
