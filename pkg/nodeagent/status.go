package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/internal/durable"
)

// Status is what the agent did on its node: the pod's readiness and why.
type Status struct {
	Ready bool `json:"ready"`
	// Reason is one of the Reason* constants, Message the detail: the
	// file and line install refused, what doctor said.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// String is the status as the readiness probe prints it.
func (s Status) String() string {
	if s.Message == "" {
		return s.Reason
	}
	return s.Reason + ": " + s.Message
}

// maxStatusBytes bounds the status file read.
const maxStatusBytes = 64 << 10

// WriteStatus replaces the status file at path (its directory created).
// The file is the pod's own: it need not survive a power loss.
func WriteStatus(path string, s Status) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("status file: %w", err)
	}
	if err := durable.WriteFile(path, append(data, '\n'), 0o644, durable.NoSync()); err != nil {
		return fmt.Errorf("status file: %w", err)
	}
	return nil
}

// ReadStatus reads the status file at path; a missing file is a status
// not ready, the agent not yet started.
func ReadStatus(path string) (Status, error) {
	data, err := boundedread.ReadFile(path, maxStatusBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return Status{Reason: ReasonStarting, Message: "the agent has written no status yet (" + path + ")"}, nil
	}
	if err != nil {
		return Status{}, fmt.Errorf("status file: %w", err)
	}
	var s Status
	if err := json.Unmarshal(data, &s); err != nil {
		return Status{}, fmt.Errorf("status file %s: not the agent's status", path)
	}
	return s, nil
}
