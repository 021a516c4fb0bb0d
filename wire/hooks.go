package wire

// HookAnswer is the body of a delivery's 2xx answer.
type HookAnswer struct {
	Delivery string `json:"delivery"`
	RunID    string `json:"run_id,omitempty"`
	Ignored  string `json:"ignored,omitempty"`
}
