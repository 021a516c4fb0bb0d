package driver

// Reserver holds the coarse primitives under the rules' BudgetReserve.
type Reserver interface{}
