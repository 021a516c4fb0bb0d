package driver

// RunCreator holds the coarse primitives under the rules' RunCreate.
type RunCreator interface{}
