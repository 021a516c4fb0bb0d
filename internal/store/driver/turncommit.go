package driver

// TurnCommitter holds the coarse primitives under the rules' TurnCommit and TurnCommitMany.
type TurnCommitter interface{}
