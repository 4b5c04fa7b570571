// Package twin fits the simulated engine (package sim) to measured runs of a real one:
// from results files (and their metrics files) of a few light runs against one endpoint
// it estimates the step model's parameters, each with a standard error, says which it
// could not determine and which run would, and predicts every run with the fitted engine
// (sim.Simulate, in model time) to state the twin's error on the figures `analyze`
// reports. `llmreplay sim fit` is its command; the result is a sim.ProfileFile.
package twin
