package registry

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Challenge is the WWW-Authenticate value of every 401 the registry sends.
const Challenge = `Basic realm="pullguard"`

// Error codes of the distribution specification that the middleware
// answers with itself.
const (
	CodeUnauthorized = "UNAUTHORIZED"
	CodeDenied       = "DENIED"
	CodeNameInvalid  = "NAME_INVALID"
	CodeUnknown      = "METHOD_UNKNOWN"
	CodeUnavailable  = "UNAVAILABLE"
)

// apiError is one entry of a distribution error body.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Detail  any    `json:"detail,omitempty"`
}

// writeError answers status with a body in the distribution format,
// {"errors":[{"code":...,"message":...}]}, adding the Basic challenge to
// a 401.
func writeError(w http.ResponseWriter, status int, code, message string, detail any) {
	body, err := json.Marshal(struct {
		Errors []apiError `json:"errors"`
	}{Errors: []apiError{{Code: code, Message: message, Detail: detail}}})
	if err != nil {
		// Only detail can fail, and the middleware only passes plain values.
		body = []byte(`{"errors":[{"code":"` + code + `"}]}`)
	}
	body = append(body, '\n')
	h := w.Header()
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", Challenge)
	}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Docker-Distribution-API-Version", "registry/2.0")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// accessDetail is the detail of an authorization error: the resource and
// the action refused, as distribution reports them.
type accessDetail struct {
	Type   string `json:"Type"`
	Name   string `json:"Name"`
	Action string `json:"Action"`
}

func newAccessDetail(repo string, need permission) []accessDetail {
	if repo == "" {
		return nil
	}
	action := "pull"
	if need == permWrite {
		action = "push"
	}
	return []accessDetail{{Type: "repository", Name: repo, Action: action}}
}
