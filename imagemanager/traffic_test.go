package imagemanager_test

import (
	"context"
	"fmt"
	"testing"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/imagemanager"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/registry"
)

// BenchmarkRegistryTraffic starts 120 pods of 4 tenants (one of them
// without access) on one image, with pullguard (IfNotPresent) and with the
// old workaround (Always on every pod), and reports the registry's own
// request counts per pass.
func BenchmarkRegistryTraffic(b *testing.B) {
	for _, mode := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullAlways} {
		b.Run("policy="+string(mode), func(b *testing.B) {
			ctx := context.Background()
			users := []string{"t0", "t1", "t2", "t3"}
			var cfgUsers []registry.User
			for _, u := range users {
				cfgUsers = append(cfgUsers, registry.User{Name: u, Password: "pw-" + u})
			}
			reg, err := registry.New(registry.Config{Users: cfgUsers, Repositories: []registry.Repository{{Name: "shared/app", Readers: users[:3]}}},
				registry.WithBcryptCost(bcrypt.MinCost), registry.WithLogger(klog.Background().V(10)))
			if err != nil {
				b.Fatal(err)
			}
			defer reg.Close()
			img, _ := registry.Image(3, 3, 32<<10)
			pushed, err := reg.Push(ctx, "shared/app", "v1", img)
			if err != nil {
				b.Fatal(err)
			}
			var manifests, blobs, refused int
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				dir := b.TempDir()
				rt, _ := criruntime.NewEmbedded(dir + "/rt")
				tr, err := credtracker.New(ctx, credtracker.Config{Dir: dir + "/ct"}, guardedpull.Inventory(rt), credtracker.WithLogger(klog.Background().V(10)))
				if err != nil {
					b.Fatal(err)
				}
				m, _ := imagemanager.New(rt, tr, record.NewFakeRecorder(10000), imagemanager.WithRegistryQPS(0, 0), imagemanager.WithBackOff(0, 0), imagemanager.WithLogger(klog.Background().V(10)))
				reg.Reset()
				b.StartTimer()
				for i := range 120 {
					t := users[i%len(users)]
					secret := registrySecret("ns-"+t, "regcred", reg.Host(), t)
					secret.Data[corev1.DockerConfigJsonKey] = []byte(fmt.Sprintf(`{"auths":{%q:{"username":%q,"password":"pw-%s"}}}`, reg.Host(), t, t))
					p := pod("ns-"+t, fmt.Sprintf("p%d", i), "regcred")
					if _, err := m.EnsureImageExists(ctx, imagemanager.Request{Pod: p, Image: pushed.Reference, PullPolicy: mode, PullSecrets: []*corev1.Secret{secret}}); err != nil {
						refused++
					}
				}
				b.StopTimer()
				manifests += reg.Count(registry.Filter{Kind: registry.KindManifest})
				blobs += reg.Count(registry.Filter{Kind: registry.KindBlob})
				tr.Close()
				rt.Close(ctx)
				b.StartTimer()
			}
			b.ReportMetric(float64(manifests)/float64(b.N), "manifest-req/pass")
			b.ReportMetric(float64(blobs)/float64(b.N), "blob-req/pass")
			b.ReportMetric(float64(refused)/float64(b.N), "refused-pods/pass")
		})
	}
}
