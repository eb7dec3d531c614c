package kubeletcri

import (
	"context"
	"time"

	criapi "k8s.io/cri-api/pkg/apis"
	criclient "k8s.io/cri-client/pkg"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// New connects to the CRI image service at endpoint (the forms
// criruntime.ParseEndpoint accepts) as the kubelet does: cri-client's
// builder with its defaults, timeout as the connection timeout. Close the
// service when done.
func New(ctx context.Context, endpoint string, timeout time.Duration) (criapi.ImageManagerService, error) {
	ep, err := criruntime.ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	return criclient.NewRemoteImageServiceBuilder().WithEndpoint(ep).WithConnectionTimeout(timeout).Build(ctx)
}
