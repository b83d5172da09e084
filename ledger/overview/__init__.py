"""The overview: the signed-in home's charts, drawn from rollups the worker folds from the ledger."""
