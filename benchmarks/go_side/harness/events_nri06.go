//go:build !nri012

// Lifecycle events as containerd/nri 0.6.x takes them: one StateChangeEvent type for all.
package main

import (
	"context"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

type step func(context.Context, *api.PodSandbox, *api.Container) error

// reportVersion does nothing: containerd/nri 0.6.x tells plugins no version in Configure.
func reportVersion(*adaptation.Adaptation, string) {}

func runPodSandbox(ctx context.Context, nri *adaptation.Adaptation, pod *api.PodSandbox) error {
	return nri.RunPodSandbox(ctx, &api.StateChangeEvent{Pod: pod})
}

// startSteps are the events after a create: PostCreateContainer, StartContainer, PostStartContainer.
func startSteps(nri *adaptation.Adaptation) []step {
	var steps []step
	for _, event := range []func(context.Context, *api.StateChangeEvent) error{
		nri.PostCreateContainer, nri.StartContainer, nri.PostStartContainer,
	} {
		event := event // GOPATH builds keep the pre-1.22 loop variable
		steps = append(steps, func(ctx context.Context, p *api.PodSandbox, c *api.Container) error {
			return event(ctx, &api.StateChangeEvent{Pod: p, Container: c})
		})
	}
	return steps
}

func removeContainer(ctx context.Context, nri *adaptation.Adaptation, p *api.PodSandbox, c *api.Container) error {
	return nri.RemoveContainer(ctx, &api.StateChangeEvent{Pod: p, Container: c})
}
