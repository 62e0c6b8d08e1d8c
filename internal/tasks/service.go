package tasks

import (
	"context"
	"errors"
)

// Service holds the rules of the task API over a Repository.
type Service struct {
	repo *Repository
}

// NewService returns a service whose repository runs on db.
func NewService(db DB) *Service {
	return &Service{repo: NewRepository(db)}
}

// Page is one page of a user's tasks.
type Page struct {
	// Tasks are newest first; never nil.
	Tasks []Task
	// Next is where the following page starts; nil on the last page.
	Next *Position
}

// insertAttempts bounds Create's loop for the race in which the row that
// held the key is deleted between the insert and the read.
const insertAttempts = 3

// Create creates a task for userID. With a non-nil ref (the request's
// Idempotency-Key and fingerprint) the key is recorded on the row, and a user
// row that already holds the key answers instead of a new one: with the same
// fingerprint that task is returned with replayed true and nothing is
// created; with another fingerprint the error is ErrKeyReused.
func (s *Service) Create(ctx context.Context, userID string, in NewTask, ref *IdempotencyRef) (t Task, replayed bool, err error) {
	for range insertAttempts {
		t, inserted, err := s.repo.Insert(ctx, userID, in, ref)
		if err != nil || inserted {
			return t, false, err
		}
		if ref == nil { // unreachable: only a key can conflict
			return Task{}, false, &DBError{Op: "insert", Err: errors.New("insert without a key inserted nothing")}
		}
		existing, hash, err := s.repo.FindByKey(ctx, userID, ref.Key)
		switch {
		case errors.Is(err, ErrNotFound):
			continue // deleted since the insert saw it: insert again
		case err != nil:
			return Task{}, false, err
		case hash != ref.Fingerprint:
			return Task{}, false, ErrKeyReused
		}
		return existing, true, nil
	}
	return Task{}, false, &DBError{Op: "insert", Err: errors.New("the task holding the idempotency key kept disappearing")}
}

// Get returns the user's task id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, userID, id string) (Task, error) {
	return s.repo.Get(ctx, userID, id)
}

// List returns up to limit of the user's tasks after the position (nil for
// the first page), newest first.
func (s *Service) List(ctx context.Context, userID string, after *Position, limit int) (Page, error) {
	tasks, err := s.repo.List(ctx, userID, after, limit+1)
	if err != nil {
		return Page{}, err
	}
	page := Page{Tasks: tasks}
	if len(tasks) > limit {
		page.Tasks = tasks[:limit]
		last := page.Tasks[limit-1]
		page.Next = &Position{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return page, nil
}

// Update applies p to the user's task id and returns it. An empty patch
// changes nothing, not even updated_at, and returns the task as it is.
func (s *Service) Update(ctx context.Context, userID, id string, p Patch) (Task, error) {
	if p.Empty() {
		return s.repo.Get(ctx, userID, id)
	}
	return s.repo.Update(ctx, userID, id, p)
}

// Delete removes the user's task id, or returns ErrNotFound. With a non-nil
// ref (the request's Idempotency-Key and fingerprint) the deletion records
// the key, and a task already deleted by a request with that key answers as
// that request did: with the same fingerprint replayed is true and the error
// nil; with another fingerprint the error is ErrKeyReused. A task deleted
// under another key, or none, is ErrNotFound.
func (s *Service) Delete(ctx context.Context, userID, id string, ref *IdempotencyRef) (replayed bool, err error) {
	err = s.repo.Delete(ctx, userID, id, ref)
	if ref == nil || !errors.Is(err, ErrNotFound) {
		return false, err
	}
	by, err := s.repo.FindDeletion(ctx, userID, id)
	switch {
	case err != nil:
		return false, err // ErrNotFound: never deleted with a key
	case by.Key != ref.Key:
		return false, ErrNotFound
	case by.Fingerprint != ref.Fingerprint:
		return false, ErrKeyReused
	}
	return true, nil
}
