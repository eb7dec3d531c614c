package credtracker

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pullguard/pullguard/pkg/credential"
)

func BenchmarkBulkLoad(b *testing.B) {
	h, _, err := credential.LoadOrCreateHasher(filepath.Join(b.TempDir(), HashKeyFile))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	recs := make([]*ImageRecord, 100_000)
	for i := range recs {
		c := benchCred(h, i)
		repo, _ := RepositoryName(benchImage(i))
		recs[i] = (*ImageRecord)(nil).withPull(benchRef(i), repo, c.Source, c.Hash, now, DefaultMaxEntries, 0)
	}
	for b.Loop() {
		x := newRecordIndex()
		x.storeAll(recs)
	}
}
