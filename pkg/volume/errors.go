package volume

import "errors"

// The operation executor chooses the next actual state by the kind of error an operation
// returns, as upstream's pkg/volume/util/types does: a transient error leaves the state as
// it was, an uncertain error means the operation may have had an effect (a timeout, a
// crash), anything else is final.

type uncertainError struct{ err error }

func (e *uncertainError) Error() string { return e.err.Error() }
func (e *uncertainError) Unwrap() error { return e.err }

// NewUncertainError marks err as "the operation may still be in progress or have had an
// effect": the volume is recorded as uncertain and is set up or torn down again.
func NewUncertainError(err error) error {
	if err == nil {
		return nil
	}
	return &uncertainError{err: err}
}

// IsUncertain reports whether err (or one it wraps) is uncertain.
func IsUncertain(err error) bool {
	var u *uncertainError
	return errors.As(err, &u)
}

type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// NewTransientError marks err as "nothing was done": the state is left as it was.
func NewTransientError(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err}
}

// IsTransient reports whether err (or one it wraps) is transient.
func IsTransient(err error) bool {
	var t *transientError
	return errors.As(err, &t)
}

type attachLimitError struct{ err error }

func (e *attachLimitError) Error() string { return e.err.Error() }
func (e *attachLimitError) Unwrap() error { return e.err }

// NewAttachLimitExceededError marks err as "the node has reached the driver's attachment
// limit" (an attach failed with ResourceExhausted while the driver's allocatable count is
// mutable): the volume manager rejects the pod, as the kubelet does with reason
// VolumeAttachmentLimitExceeded, instead of retrying forever.
func NewAttachLimitExceededError(err error) error {
	if err == nil {
		return nil
	}
	return &attachLimitError{err: err}
}

// IsAttachLimitExceeded reports whether err (or one it wraps) is an attach limit error.
func IsAttachLimitExceeded(err error) bool {
	var a *attachLimitError
	return errors.As(err, &a)
}
