package imageref_test

import (
	"testing"

	"github.com/distribution/reference"

	"github.com/pullguard/pullguard/pkg/imageref"
)

var benchNames = []struct{ name, image string }{
	{"qualified", "registry.example:5000/team-a/app:v1"},
	{"digest", "registry.example/team/app@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	{"short", "alpine:3.19"},
}

// BenchmarkParse compares imageref.Parse with distribution/reference's
// ParseNormalizedNamed on the same names.
func BenchmarkParse(b *testing.B) {
	for _, bn := range benchNames {
		b.Run("imageref/"+bn.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := imageref.Parse(bn.image); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("distribution/"+bn.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reference.ParseNormalizedNamed(bn.image); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
