package fuseserver

import "errors"

// Placeholder until the io_uring queue driver lands.

type uringTransport struct{}

func uringSupported() error                       { return errors.New("io_uring transport not built yet") }
func uringEnable() (bool, error)                  { return false, errors.New("io_uring transport not built yet") }
func startURing(*Server) (*uringTransport, error) { return nil, errors.New("not built") }
func (u *uringTransport) start()                  {}
func (u *uringTransport) wait()                   {}
