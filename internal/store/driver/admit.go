package driver

// Admitter holds the coarse primitives under the rules' BatchAdmit.
type Admitter interface{}
