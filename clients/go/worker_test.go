package streamplane

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/streamplane/streamplane/clients/go/streamplanev1"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWhoAmI prints who the coordinator at STREAMPLANE_COORDINATOR takes this client for (driven by
// tests/rpc/test_security.py with the TLS and token settings of the environment, see Dial).
func TestWhoAmI(t *testing.T) {
	coordinator := os.Getenv("STREAMPLANE_COORDINATOR")
	if coordinator == "" {
		t.Skip("driven by tests/rpc/test_security.py (STREAMPLANE_COORDINATOR unset)")
	}
	conn, err := Dial(coordinator)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	me, err := pb.NewAuthServiceClient(conn).WhoAmI(ctx, &pb.WhoAmIRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("whoami name=%s role=%s via=%s\n", me.GetName(), me.GetRole(), me.GetVia())
}

// TestWhoAmIAcrossAStall asks WhoAmI, waits for the file STREAMPLANE_GO_STALLED (the driver, tests/e2e/test_replicas.py,
// has stopped the replica in use meanwhile), then asks again with a 30 s deadline and prints how long it took:
// keepalive pings must drop the stopped replica well before that deadline. The call under way then fails
// UNAVAILABLE, as a call to a replica that died does, and is asked once more, as callers of idempotent calls do.
func TestWhoAmIAcrossAStall(t *testing.T) {
	coordinator, stalled := os.Getenv("STREAMPLANE_COORDINATOR"), os.Getenv("STREAMPLANE_GO_STALLED")
	if coordinator == "" || stalled == "" {
		t.Skip("driven by tests/e2e/test_replicas.py (STREAMPLANE_COORDINATOR or STREAMPLANE_GO_STALLED unset)")
	}
	conn, err := Dial(coordinator)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewAuthServiceClient(conn)
	ask := func() time.Duration {
		began := time.Now()
		for attempt := 1; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := client.WhoAmI(ctx, &pb.WhoAmIRequest{})
			cancel()
			if err == nil {
				return time.Since(began)
			}
			// the call under way when the pings go unanswered fails UNAVAILABLE; the next one goes elsewhere
			if status.Code(err) != codes.Unavailable || attempt == 2 {
				t.Fatal(err)
			}
			fmt.Printf("attempt %d: %v\n", attempt, err)
		}
	}
	ask()
	fmt.Println("asked once")
	for {
		if _, err := os.Stat(stalled); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("asked again in %.1f s\n", ask().Seconds())
}

// TestGroupWorker is a Go member of a consumer group, driven by tests/e2e/test_go_client.py: it reads the leases
// it is granted straight from Kafka, writes each record's value to STREAMPLANE_GO_WORKER_OUT, commits with
// the lease's epoch, and hands revoked leases back after a last commit. It stops when the file
// STREAMPLANE_GO_WORKER_STOP appears.
func TestGroupWorker(t *testing.T) {
	coordinator, out := os.Getenv("STREAMPLANE_COORDINATOR"), os.Getenv("STREAMPLANE_GO_WORKER_OUT")
	if coordinator == "" || out == "" {
		t.Skip("driven by tests/e2e/test_go_client.py (STREAMPLANE_COORDINATOR and STREAMPLANE_GO_WORKER_OUT unset)")
	}
	stopFile := os.Getenv("STREAMPLANE_GO_WORKER_STOP")
	conn, err := Dial(coordinator)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	file, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := Join(ctx, conn, os.Getenv("STREAMPLANE_GO_WORKER_GROUP"), "go-worker",
		map[string][]string{os.Getenv("STREAMPLANE_GO_WORKER_STREAM"): {"realtime"}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	write := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := file.WriteString(line); err != nil {
			t.Error(err)
		}
	}
	leases := map[string]*lease{}
	stopped := time.NewTicker(100 * time.Millisecond)
	defer stopped.Stop()
	for {
		select {
		case msg, ok := <-w.Events:
			if !ok {
				t.Fatalf("the session ended: %v", w.Err())
			}
			switch {
			case msg.GetGrant() != nil:
				g := msg.GetGrant()
				if held := leases[g.LeaseId]; held != nil && held.epoch == g.Epoch {
					continue
				}
				l := startLease(ctx, w, g, write, t)
				leases[g.LeaseId] = l
			case msg.GetRevoke() != nil:
				r := msg.GetRevoke()
				if l := leases[r.LeaseId]; l != nil && l.epoch == r.Epoch {
					l.stop() // its last commit is in before the lease goes back
					delete(leases, r.LeaseId)
					if r.DeadlineUnixMs > 0 {
						if err := w.Release(r.LeaseId, r.Epoch); err != nil {
							t.Fatal(err)
						}
					}
				}
			case msg.GetGenerationChange() != nil:
				c := msg.GetGenerationChange()
				if l := leases[c.LeaseId]; l != nil && c.EndOffset >= 0 {
					l.sealAt(c.EndOffset)
				}
			}
		case <-stopped.C:
			if _, err := os.Stat(stopFile); err == nil {
				for _, l := range leases {
					l.stop()
				}
				if err := w.Close(); err != nil {
					t.Log(err)
				}
				return
			}
		}
	}
}

// lease reads one granted partition until stopped, committing what it processed every 100 ms.
type lease struct {
	epoch  uint64
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	end    int64
}

func (l *lease) stop() {
	l.cancel()
	<-l.done
}

func (l *lease) sealAt(end int64) {
	l.mu.Lock()
	l.end = end
	l.mu.Unlock()
}

func startLease(parent context.Context, w *Worker, g *pb.Grant, write func(string), t *testing.T) *lease {
	ctx, cancel := context.WithCancel(parent)
	l := &lease{epoch: g.Epoch, cancel: cancel, done: make(chan struct{}), end: g.EndOffset}
	start := kgo.NewOffset().AtStart()
	if g.StartOffset >= 0 {
		start = kgo.NewOffset().At(g.StartOffset)
	}
	partition := int32(g.Partition.Partition)
	go func() {
		defer close(l.done)
		client, err := kgo.NewClient(
			kgo.SeedBrokers(strings.Split(g.BootstrapServers, ",")...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{g.Topic: {partition: start}}),
			kgo.FetchMaxWait(100*time.Millisecond),
			// librdkafka's mock cluster answers ApiVersions v3+ in a form franz-go cannot read; 2.3's request
			// versions work there and on Kafka 4 alike
			kgo.MaxVersions(kversion.V2_3_0()),
		)
		if err != nil {
			t.Error(err)
			return
		}
		defer client.Close()
		committed, next, high, first := int64(-1), int64(-1), int64(0), g.StartOffset
		commit := func() {
			if next < 0 || next == committed {
				return
			}
			from := committed
			if from < 0 {
				from = first // the grant's start, or (no progress yet) the first record read
			}
			c, done := context.WithTimeout(context.Background(), 10*time.Second)
			defer done()
			if _, err := w.Commit(c, g.LeaseId, g.Epoch, [][2]int64{{from, next}}, high); err != nil {
				t.Logf("commit: %v", err) // a moved lease is fenced: its next holder reads on
				return
			}
			committed = next
		}
		defer commit()
		last := time.Now()
		for ctx.Err() == nil {
			poll, done := context.WithTimeout(ctx, 200*time.Millisecond)
			fetches := client.PollFetches(poll)
			done()
			for _, e := range fetches.Errors() {
				if ctx.Err() == nil && e.Err != context.DeadlineExceeded && e.Err != context.Canceled {
					t.Logf("fetch %s/%d: %v", e.Topic, e.Partition, e.Err)
				}
			}
			l.mu.Lock()
			end := l.end
			l.mu.Unlock()
			fetches.EachPartition(func(p kgo.FetchTopicPartition) {
				if p.HighWatermark > high {
					high = p.HighWatermark
				}
				for _, r := range p.Records {
					if ctx.Err() != nil || (end >= 0 && r.Offset >= end) {
						return // gone, or past a sealed generation's end
					}
					if first < 0 {
						first = r.Offset
					}
					write(fmt.Sprintf("%s %s %d\n", r.Value, g.LeaseId, g.Epoch))
					next = r.Offset + 1
				}
			})
			if time.Since(last) >= 100*time.Millisecond {
				commit()
				last = time.Now()
			}
		}
	}()
	return l
}
