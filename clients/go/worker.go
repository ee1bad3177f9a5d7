// Package streamplane is a small Go client of the streamplane coordinator: a worker joins a consumer group
// through the Assigner's session, receives grants, revokes and seals, commits what it processed with the
// lease's epoch, and hands revoked leases back. Records are read straight from Kafka with any Kafka client
// (the test uses franz-go): a grant says which topic, partition and cluster, and where to start.
package streamplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "github.com/streamplane/streamplane/clients/go/streamplanev1"
	"google.golang.org/grpc"
)

// Worker is one member of a consumer group: its session with the coordinator.
type Worker struct {
	Group     string
	WorkerID  string
	SessionID string
	// Events carries the coordinator's grants, revokes and generation changes, in order; it is closed when
	// the session ends (Err then says why).
	Events <-chan *pb.AssignerMessage

	commitlog pb.CommitLogServiceClient
	session   pb.AssignerService_SessionClient
	cancel    context.CancelFunc
	sendMu    sync.Mutex
	errMu     sync.Mutex
	err       error
	done      chan struct{}
}

// Join opens a session for workerID in group, reading the given lanes of each stream (no lanes: every lane
// but dlq). The session lives until Close or until ctx ends.
func Join(ctx context.Context, conn *grpc.ClientConn, group, workerID string, streams map[string][]string) (*Worker, error) {
	ctx, cancel := context.WithCancel(ctx)
	session, err := pb.NewAssignerServiceClient(conn).Session(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("opening the session of %s in group %s: %w", workerID, group, err)
	}
	hello := &pb.Hello{Group: group, WorkerId: workerID, Capacity: 1}
	for stream, lanes := range streams {
		hello.Subscriptions = append(hello.Subscriptions, &pb.Subscription{Stream: stream, Lanes: lanes})
	}
	if err := session.Send(&pb.WorkerMessage{Kind: &pb.WorkerMessage_Hello{Hello: hello}}); err != nil {
		cancel()
		return nil, fmt.Errorf("sending the hello: %w", err)
	}
	first, err := session.Recv()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("joining group %s: %w", group, err)
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		cancel()
		return nil, errors.New("the coordinator did not answer the hello with a welcome")
	}
	events := make(chan *pb.AssignerMessage, 1024)
	w := &Worker{
		Group: group, WorkerID: workerID, SessionID: welcome.SessionId, Events: events,
		commitlog: pb.NewCommitLogServiceClient(conn), session: session, cancel: cancel, done: make(chan struct{}),
	}
	go w.receive(events)
	go w.heartbeat(time.Duration(welcome.HeartbeatIntervalMs) * time.Millisecond)
	return w, nil
}

func (w *Worker) receive(events chan<- *pb.AssignerMessage) {
	defer close(events)
	defer close(w.done)
	for {
		msg, err := w.session.Recv()
		if err != nil {
			w.fail(err)
			return
		}
		events <- msg
	}
}

func (w *Worker) heartbeat(every time.Duration) {
	if every <= 0 {
		every = 250 * time.Millisecond
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-ticker.C:
			if err := w.send(&pb.WorkerMessage{Kind: &pb.WorkerMessage_Heartbeat{Heartbeat: &pb.Heartbeat{}}}); err != nil {
				w.fail(err)
				return
			}
		}
	}
}

func (w *Worker) send(msg *pb.WorkerMessage) error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	return w.session.Send(msg)
}

func (w *Worker) fail(err error) {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// Err is why the session ended (nil while it lives, or after Close).
func (w *Worker) Err() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

// Commit records offsets [start, end) of each acked range as done, for the lease held at epoch. A stale
// epoch (the lease moved on) is refused with FAILED_PRECONDITION: the caller stops working on that lease.
// Returns the partition's low watermark after the commit.
func (w *Worker) Commit(ctx context.Context, leaseID string, epoch uint64, acked [][2]int64, highWatermark int64) (int64, error) {
	// The session holding the lease names itself: a commit from another session is fenced.
	req := &pb.CommitRequest{Group: w.Group, LeaseId: leaseID, Epoch: epoch, HighWatermark: highWatermark, SessionId: w.SessionID}
	for _, r := range acked {
		req.Acked = append(req.Acked, &pb.OffsetRange{Start: r[0], End: r[1]})
	}
	got, err := w.commitlog.Commit(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("commit of %s at epoch %d: %w", leaseID, epoch, err)
	}
	return got.LowWatermark, nil
}

// Release hands a revoked lease back once what it processed is committed.
func (w *Worker) Release(leaseID string, epoch uint64) error {
	return w.send(&pb.WorkerMessage{Kind: &pb.WorkerMessage_Release{Release: &pb.Release{LeaseId: leaseID, Epoch: epoch}}})
}

// Close leaves the group: the coordinator frees the worker's leases at once.
func (w *Worker) Close() error {
	w.sendMu.Lock()
	err := w.session.CloseSend()
	w.sendMu.Unlock()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
	}
	w.cancel()
	return err
}
