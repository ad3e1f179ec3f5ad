//go:build invariants

package iolock

// invariantsEnabled turns reported bugs into panics. See the package
// documentation, Build tag invariants.
const invariantsEnabled = true
