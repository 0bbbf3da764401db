package lockkit.interop;

import java.io.FileWriter;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RAtomicLong;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * The Redisson side of lockkit's interop test: WORKERS threads of one Redisson client take the
 * object NAME ITER times each, while lockkit's examples/interop_peer.rs does the same on the
 * lockkit side. Usage: Main MODE REDIS_URL NAME WORKERS ITER PERMITS DIR
 *
 * <ul>
 *   <li>mutex: RFencedLock (RLock's layout plus the token counter), lockAndGetToken();
 *   <li>fair: RFairLock, lock();
 *   <li>fairorder: one RFairLock holder and waiters of both sides queued in turn (lockkit, then
 *       Redisson, then lockkit): each logs its turn, and they must get the lock in that order;
 *   <li>rw: RReadWriteLock, every third hold of a worker a write, the others reads;
 *   <li>sem: RSemaphore with PERMITS permits (trySetPermits), one permit per hold.
 * </ul>
 *
 * Overlaps are detected with one shared counter in Redis: a reader or permit holder adds 1, a
 * writer or mutex holder adds 1000, so an exclusive holder must see exactly 1000, a reader less
 * than 1000 and a permit holder at most PERMITS. Each hold appends "java KIND acquired_ms
 * released_ms token" to DIR/java.order (token -1 where Redisson has none).
 */
public final class Main {
    private static final long EXCLUSIVE = 1000;

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String url = args[1];
        String name = args[2];
        int workers = Integer.parseInt(args[3]);
        int iter = Integer.parseInt(args[4]);
        int permits = Integer.parseInt(args[5]);
        String dir = args[6];
        if (!List.of("mutex", "fair", "fairorder", "rw", "sem").contains(mode)) {
            throw new IllegalArgumentException("unknown mode " + mode);
        }
        Config cfg = new Config();
        cfg.useSingleServer().setAddress(url);
        RedissonClient client = Redisson.create(cfg);
        try {
            startTogether(client, name);
            if (mode.equals("fairorder")) {
                fairOrder(client, name);
                return;
            }
            RAtomicLong inside = client.getAtomicLong("{" + name + "}:interop-inside");
            if (mode.equals("sem")) {
                client.getSemaphore(name).trySetPermits(permits);
            }
            List<Thread> threads = new ArrayList<>();
            List<Throwable> failures = new ArrayList<>();
            for (int w = 0; w < workers; w++) {
                Thread t = new Thread(() -> {
                    try {
                        work(client, mode, name, iter, permits, inside, dir);
                    } catch (Throwable e) {
                        synchronized (failures) {
                            failures.add(e);
                        }
                    }
                });
                t.start();
                threads.add(t);
            }
            for (Thread t : threads) {
                t.join();
            }
            if (!failures.isEmpty()) {
                failures.get(0).printStackTrace();
                System.exit(1);
            }
        } finally {
            client.shutdown(0, 2, TimeUnit.SECONDS);
        }
    }

    /** Both peers start together: the JVM starts far slower than the Rust peer. */
    private static void startTogether(RedissonClient client, String name) throws InterruptedException {
        RAtomicLong ready = client.getAtomicLong("{" + name + "}:interop-ready");
        ready.incrementAndGet();
        long waitUntil = System.currentTimeMillis() + 60_000;
        while (ready.get() < 2) {
            if (System.currentTimeMillis() > waitUntil) {
                throw new IllegalStateException("the lockkit peer never started");
            }
            Thread.sleep(5);
        }
    }

    private static void work(RedissonClient client, String mode, String name, int iter, int permits,
            RAtomicLong inside, String dir) throws Exception {
        RFencedLock fenced = client.getFencedLock(name);
        RLock fair = client.getFairLock(name);
        RReadWriteLock rw = client.getReadWriteLock(name);
        RSemaphore sem = client.getSemaphore(name);
        for (int i = 0; i < iter; i++) {
            long token = -1;
            String kind;
            RLock held = null;
            long weight;
            switch (mode) {
                case "mutex":
                    token = fenced.lockAndGetToken();
                    held = fenced;
                    kind = "x";
                    weight = EXCLUSIVE;
                    break;
                case "fair":
                    fair.lock();
                    held = fair;
                    kind = "x";
                    weight = EXCLUSIVE;
                    break;
                case "rw":
                    boolean write = i % 3 == 0;
                    held = write ? rw.writeLock() : rw.readLock();
                    held.lock();
                    kind = write ? "w" : "r";
                    weight = write ? EXCLUSIVE : 1;
                    break;
                default:
                    if (!sem.tryAcquire(1, 30, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("no permit within 30 s");
                    }
                    kind = "p";
                    weight = 1;
            }
            long acquired = System.currentTimeMillis();
            long now = inside.addAndGet(weight);
            boolean ok = weight == EXCLUSIVE ? now == EXCLUSIVE
                    : mode.equals("rw") ? now < EXCLUSIVE : now <= permits;
            if (!ok) {
                System.err.println("OVERLAP: Redisson " + kind + " hold saw " + now + " inside");
                System.exit(3);
            }
            Thread.sleep(5);
            inside.addAndGet(-weight);
            long released = System.currentTimeMillis();
            append(dir + "/java.order", "java " + kind + " " + acquired + " " + released + " " + token);
            if (held != null) {
                held.unlock();
            } else {
                sem.release(1);
            }
            // Give the other side a chance to be waiting before we try again.
            Thread.sleep(2);
        }
    }

    /**
     * The Redisson side of "fairorder": steps are taken in turn through the counter
     * {NAME}:interop-step; waiters record their turn in the list {NAME}:interop-turns.
     */
    private static void fairOrder(RedissonClient client, String name) throws Exception {
        RAtomicLong step = client.getAtomicLong("{" + name + "}:interop-step");
        RLock holder = client.getFairLock(name);
        holder.lock();
        step.set(1);
        awaitStep(step, 2);
        Thread waiter = new Thread(() -> {
            RLock mine = client.getFairLock(name);
            mine.lock();
            client.getList("{" + name + "}:interop-turns", org.redisson.client.codec.StringCodec.INSTANCE)
                    .add("redisson");
            sleep(50);
            mine.unlock();
        });
        waiter.start();
        awaitQueued(client, name, 2);
        step.set(3);
        awaitStep(step, 4);
        holder.unlock();
        waiter.join(30_000);
        if (waiter.isAlive()) {
            throw new IllegalStateException("the Redisson waiter never got the lock");
        }
    }

    private static void awaitStep(RAtomicLong step, long n) throws InterruptedException {
        long until = System.currentTimeMillis() + 30_000;
        while (step.get() < n) {
            if (System.currentTimeMillis() > until) {
                throw new IllegalStateException("the lockkit peer never took step " + n);
            }
            Thread.sleep(5);
        }
    }

    private static void awaitQueued(RedissonClient client, String name, int n) throws InterruptedException {
        String queue = name.contains("{") ? "redisson_lock_queue:" + name : "redisson_lock_queue:{" + name + "}";
        long until = System.currentTimeMillis() + 30_000;
        while (client.getList(queue, org.redisson.client.codec.StringCodec.INSTANCE).size() < n) {
            if (System.currentTimeMillis() > until) {
                throw new IllegalStateException("the Redisson waiter never queued");
            }
            Thread.sleep(5);
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static synchronized void append(String path, String line) throws IOException {
        try (FileWriter w = new FileWriter(path, true)) {
            w.write(line + "\n");
        }
    }
}
