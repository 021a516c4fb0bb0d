package driver

// TurnLoader holds the coarse primitives under the rules' TurnLoad.
type TurnLoader interface{}
