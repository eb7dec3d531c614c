package criruntime_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

func TestResolvedDigests(t *testing.T) {
	a, b := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	for _, tt := range []struct {
		name    string
		image   string
		digests []string
		want    []string
		wantErr bool
	}{
		{name: "the pulled repository only", image: "registry.example/public/tool:1",
			digests: []string{"registry.example/other/tool@" + a, "registry.example/public/tool@" + b}, want: []string{b}},
		{name: "docker hub spellings", image: "alpine:3.19", digests: []string{"docker.io/library/alpine@" + a}, want: []string{a}},
		{name: "loopback registry", image: "127.0.0.1:5000/team-a/app:v1", digests: []string{"127.0.0.1:5000/team-a/app@" + a}, want: []string{a}},
		{name: "several", image: "registry.example/x:1", digests: []string{"registry.example/x@" + a, "registry.example/x@" + b}, want: []string{a, b}},
		{name: "another registry's repository of the same path", image: "registry.example/x:1", digests: []string{"other.example/x@" + a}, wantErr: true},
		{name: "none: fails closed", image: "registry.example/x:1", wantErr: true},
		{name: "malformed digests are skipped", image: "registry.example/x:1", digests: []string{"registry.example/x@sha256:zz", "::"}, wantErr: true},
		{name: "a digest reference expects its own digest", image: "registry.example/x@" + a, digests: []string{"registry.example/x@" + b}},
		{name: "an image ID is no reference", image: a, wantErr: true},
		{name: "empty", image: "", wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := criruntime.ResolvedDigests(tt.image, &runtimeapi.Image{Id: "sha256:" + strings.Repeat("c", 64), RepoDigests: tt.digests})
			if tt.wantErr {
				require.Error(t, err)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
