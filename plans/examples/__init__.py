"""Example inputs shipped with planner as package data (`planner example NAME -o DIR`)."""
