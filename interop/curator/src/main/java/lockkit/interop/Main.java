package lockkit.interop;

import java.io.IOException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.retry.ExponentialBackoffRetry;

/**
 * The Curator side of lockkit's ZooKeeper interop test and benchmark.
 *
 * <pre>
 *   mutex CONNECT PATH ITERATIONS DIR   contend with InterProcessMutex; overlap markers in DIR
 *   rw    CONNECT PATH ITERATIONS DIR   InterProcessReadWriteLock, alternating write and read
 *   semaphore CONNECT PATH ITERATIONS DIR  InterProcessSemaphoreV2 of the size lockkit stored in
 *                                       PATH/size, read through a SharedCount (whose seed, 5,
 *                                       would apply only if no size were stored): 1, so holders
 *                                       use the exclusive markers
 *   latch CONNECT PATH ITERATIONS DIR   LeaderLatch: lead (exclusive markers), check that the
 *                                       latch names this candidate as leader, then close; a
 *                                       reader meanwhile checks that getLeader() names whoever
 *                                       leads (DIR/leading), lockkit's candidates included
 *   selector CONNECT PATH ITERATIONS DIR  LeaderSelector: the same, leading in takeLeadership
 *   bench-uncontended CONNECT PATH SECONDS
 *   bench-contended   CONNECT PATH CLIENTS TOTAL [SERVER_PID]   the clock stops at the last
 *                                       counted grant; with SERVER_PID also the server's CPU per
 *                                       acquisition (from /proc), and always this process's
 *   election-bench    CONNECT PATH ROUNDS SESSION_MS   LeaderLatch hand-over on close, how soon
 *                                       a CuratorCache observer sees it, and failover after a
 *                                       SIGKILLed leader process (latch-lead)
 *   latch-lead        CONNECT PATH SESSION_MS   lead, print LEADING, wait to be killed
 * </pre>
 *
 * The overlap detector is a set of marker files: an exclusive holder creates DIR/writer with
 * CREATE_NEW (failing if anyone else is inside) and checks DIR/readers is empty; a reader checks
 * DIR/writer is absent and adds DIR/readers/ID. Both sides append "curator" or "lockkit" to
 * DIR/order on every exclusive entry, so the test can count hand-offs between the two. A leader
 * also names itself in DIR/leading (written by rename, removed before it resigns), so each side's
 * reader can check that its own API names the other side's leader: two reads of DIR/leading that
 * agree bracket a read of the API, which must name the same candidate.
 */
public final class Main {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "mutex" -> contend(args, false);
            case "rw" -> contend(args, true);
            case "semaphore" -> semaphore(args);
            case "latch" -> latch(args);
            case "selector" -> selector(args);
            case "bench-uncontended" -> benchUncontended(args[1], args[2], Double.parseDouble(args[3]));
            case "bench-contended" -> benchContended(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                    args.length > 5 ? Integer.parseInt(args[5]) : 0);
            case "election-bench" -> electionBench(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
            case "latch-lead" -> latchLead(args[1], args[2], Integer.parseInt(args[3]));
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }

    static CuratorFramework client(String connect) throws InterruptedException {
        return client(connect, 10_000);
    }

    static CuratorFramework client(String connect, int sessionMs) throws InterruptedException {
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(5_000)
                .retryPolicy(new ExponentialBackoffRetry(50, 5))
                .build();
        c.start();
        if (!c.blockUntilConnected(10, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no ZooKeeper connection to " + connect);
        }
        return c;
    }

    static void enterExclusive(Path dir) throws IOException {
        try {
            Files.createFile(dir.resolve("writer"));
        } catch (FileAlreadyExistsException e) {
            throw new IllegalStateException("OVERLAP: curator entered while another holder was inside");
        }
        try (var s = Files.list(dir.resolve("readers"))) {
            if (s.findAny().isPresent()) {
                throw new IllegalStateException("OVERLAP: curator writer entered with readers inside");
            }
        }
        Files.writeString(dir.resolve("order"), "curator\n", StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    static void exitExclusive(Path dir) throws IOException {
        Files.delete(dir.resolve("writer"));
    }

    /** How long a leader stays inside: long enough for the other side's reader to look. */
    static final int LEAD_MS = 20;

    /** Names `id` as the leader in DIR/leading (atomically: a reader sees all of it or none). */
    static void announce(Path dir, String id) throws IOException {
        Path tmp = dir.resolve("leading.curator");
        Files.writeString(tmp, id);
        Files.move(tmp, dir.resolve("leading"), StandardCopyOption.ATOMIC_MOVE);
    }

    static void unannounce(Path dir) throws IOException {
        Files.delete(dir.resolve("leading"));
    }

    static String leadingNow(Path dir) {
        try {
            return Files.readString(dir.resolve("leading"));
        } catch (IOException e) {
            return "";
        }
    }

    /**
     * Reads the leader through `leader` until stopped: whenever DIR/leading names the same
     * candidate before and after a read, the read must name it too. Counts the reads that named
     * one of lockkit's candidates; a wrong name is recorded in `failed`.
     */
    static Thread crossReader(Path dir, Callable<String> leader,
            AtomicBoolean stop, AtomicLong namedLockkit,
            AtomicReference<Exception> failed) {
        Thread t = new Thread(() -> {
            while (!stop.get() && failed.get() == null) {
                try {
                    String before = leadingNow(dir);
                    String named = leader.call();
                    String after = leadingNow(dir);
                    if (!before.isEmpty() && before.equals(after)) {
                        if (!before.equals(named)) {
                            failed.set(new IllegalStateException("MISNAMED: curator's reader named " + named + " while " + before + " led"));
                        } else if (named.startsWith("lockkit-")) {
                            namedLockkit.incrementAndGet();
                        }
                    }
                    Thread.sleep(1);
                } catch (Exception e) {
                    failed.set(e);
                }
            }
        });
        t.start();
        return t;
    }

    /** Stops the reader; fails unless it named one of lockkit's leaders at least once. */
    static void finishReader(Thread reader, AtomicBoolean stop,
            AtomicLong namedLockkit, AtomicReference<Exception> failed) throws Exception {
        stop.set(true);
        reader.join();
        if (failed.get() != null) throw failed.get();
        if (namedLockkit.get() == 0) {
            throw new IllegalStateException("curator's reader never named a lockkit leader");
        }
        System.out.println("curator named lockkit's leader " + namedLockkit.get() + " times");
    }

    static Path enterShared(Path dir) throws IOException {
        Path me = dir.resolve("readers").resolve("curator-" + UUID.randomUUID());
        Files.createFile(me);
        if (Files.exists(dir.resolve("writer"))) {
            throw new IllegalStateException("OVERLAP: curator reader entered with a writer inside");
        }
        return me;
    }

    static void contend(String[] args, boolean rw) throws Exception {
        String connect = args[1], path = args[2];
        int iterations = Integer.parseInt(args[3]);
        Path dir = Path.of(args[4]);
        Files.createDirectories(dir.resolve("readers"));
        try (CuratorFramework c = client(connect)) {
            // Start together, so the two sides really contend (the JVM starts slower).
            Files.writeString(dir.resolve("ready-curator"), "");
            long until = System.nanoTime() + 60_000_000_000L;
            while (!Files.exists(dir.resolve("ready-lockkit"))) {
                if (System.nanoTime() > until) throw new IllegalStateException("lockkit side never started");
                Thread.sleep(5);
            }
            InterProcessMutex mutex = new InterProcessMutex(c, path);
            InterProcessReadWriteLock rwLock = new InterProcessReadWriteLock(c, path);
            for (int i = 0; i < iterations; i++) {
                InterProcessLock lock = rw ? rwLock.writeLock() : mutex;
                if (!lock.acquire(30, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("curator did not get the lock within 30 s");
                }
                enterExclusive(dir);
                Thread.sleep(2);
                exitExclusive(dir);
                lock.release();
                if (rw) {
                    InterProcessLock read = rwLock.readLock();
                    if (!read.acquire(30, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("curator did not get the read lock within 30 s");
                    }
                    Path me = enterShared(dir);
                    Thread.sleep(2);
                    Files.delete(me);
                    read.release();
                }
            }
        }
        System.out.println("curator done " + iterations);
    }

    /** Takes one permit ITERATIONS times, counting against the size lockkit stored. */
    static void semaphore(String[] args) throws Exception {
        String connect = args[1], path = args[2];
        int iterations = Integer.parseInt(args[3]);
        Path dir = Path.of(args[4]);
        Files.createDirectories(dir.resolve("readers"));
        try (CuratorFramework c = client(connect)) {
            // lockkit stores the size (1) before it says it is ready.
            waitForPeer(dir);
            SharedCount size = new SharedCount(c, path + "/size", 5);
            size.start();
            try {
                if (size.getCount() != 1) {
                    throw new IllegalStateException("curator reads a size of " + size.getCount() + ", lockkit stored 1");
                }
                InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(c, path, size);
                for (int i = 0; i < iterations; i++) {
                    Lease lease = sem.acquire(30, TimeUnit.SECONDS);
                    if (lease == null) {
                        throw new IllegalStateException("curator did not get a permit within 30 s");
                    }
                    enterExclusive(dir);
                    Thread.sleep(2);
                    exitExclusive(dir);
                    sem.returnLease(lease);
                }
            } finally {
                size.close();
            }
        }
        System.out.println("curator done " + iterations);
    }

    static void waitForPeer(Path dir) throws Exception {
        Files.writeString(dir.resolve("ready-curator"), "");
        long until = System.nanoTime() + 60_000_000_000L;
        while (!Files.exists(dir.resolve("ready-lockkit"))) {
            if (System.nanoTime() > until) throw new IllegalStateException("lockkit side never started");
            Thread.sleep(5);
        }
    }

    /** Leads ITERATIONS times through LeaderLatch, against lockkit's election on the same path. */
    static void latch(String[] args) throws Exception {
        String connect = args[1], path = args[2];
        int iterations = Integer.parseInt(args[3]);
        Path dir = Path.of(args[4]);
        Files.createDirectories(dir.resolve("readers"));
        try (CuratorFramework c = client(connect); CuratorFramework r = client(connect)) {
            LeaderLatch reading = new LeaderLatch(r, path);
            var stop = new AtomicBoolean();
            var failed = new AtomicReference<Exception>();
            AtomicLong namedLockkit = new AtomicLong();
            waitForPeer(dir);
            Thread reader = crossReader(dir, () -> reading.getLeader().getId(), stop, namedLockkit, failed);
            for (int i = 0; i < iterations; i++) {
                String id = "curator-" + i;
                LeaderLatch latch = new LeaderLatch(c, path, id);
                latch.start();
                if (!latch.await(30, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("curator did not lead within 30 s");
                }
                enterExclusive(dir);
                String named = latch.getLeader().getId();
                if (!named.equals(id)) {
                    throw new IllegalStateException("OVERLAP: curator leads but the latch names " + named);
                }
                announce(dir, id);
                Thread.sleep(LEAD_MS);
                unannounce(dir);
                exitExclusive(dir);
                latch.close();
            }
            finishReader(reader, stop, namedLockkit, failed);
        }
        System.out.println("curator done " + iterations);
    }

    /** Leads ITERATIONS times through LeaderSelector, against lockkit's election on the same path. */
    static void selector(String[] args) throws Exception {
        String connect = args[1], path = args[2];
        int iterations = Integer.parseInt(args[3]);
        Path dir = Path.of(args[4]);
        Files.createDirectories(dir.resolve("readers"));
        try (CuratorFramework c = client(connect); CuratorFramework r = client(connect)) {
            // Never started: it only reads the participants.
            var reading = new LeaderSelector(r, path,
                    new LeaderSelectorListenerAdapter() {
                        public void takeLeadership(CuratorFramework client) {}
                    });
            var stop = new AtomicBoolean();
            var failedReader = new AtomicReference<Exception>();
            AtomicLong namedLockkit = new AtomicLong();
            waitForPeer(dir);
            Thread reader = crossReader(dir, () -> reading.getLeader().getId(), stop, namedLockkit, failedReader);
            for (int i = 0; i < iterations; i++) {
                String id = "curator-" + i;
                CountDownLatch done = new CountDownLatch(1);
                AtomicReference<Exception> failed = new AtomicReference<>();
                AtomicReference<LeaderSelector> self =
                        new AtomicReference<>();
                LeaderSelector selector =
                        new LeaderSelector(c, path,
                                new LeaderSelectorListenerAdapter() {
                                    public void takeLeadership(CuratorFramework client) throws Exception {
                                        try {
                                            enterExclusive(dir);
                                            String named = self.get().getLeader().getId();
                                            if (!named.equals(id)) {
                                                throw new IllegalStateException("OVERLAP: curator leads but the selector names " + named);
                                            }
                                            announce(dir, id);
                                            Thread.sleep(LEAD_MS);
                                            unannounce(dir);
                                            exitExclusive(dir);
                                        } catch (Exception e) {
                                            failed.set(e);
                                        } finally {
                                            done.countDown();
                                        }
                                    }
                                });
                self.set(selector);
                selector.setId(id);
                selector.start();
                if (!done.await(30, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("curator did not lead within 30 s");
                }
                selector.close();
                if (failed.get() != null) throw failed.get();
            }
            finishReader(reader, stop, namedLockkit, failedReader);
        }
        System.out.println("curator done " + iterations);
    }

    static void benchUncontended(String connect, String path, double seconds) throws Exception {
        try (CuratorFramework c = client(connect)) {
            InterProcessMutex m = new InterProcessMutex(c, path);
            for (int i = 0; i < 200; i++) { // warm-up
                m.acquire();
                m.release();
            }
            long n = 0;
            long start = System.nanoTime(), end = start + (long) (seconds * 1e9);
            while (System.nanoTime() < end) {
                m.acquire();
                m.release();
                n++;
            }
            double secs = (System.nanoTime() - start) / 1e9;
            System.out.printf("uncontended ops_per_sec=%.1f%n", n / secs);
        }
    }

    /** The CPU time (user + system) process {@code pid} has used, in nanoseconds, from
     *  /proc/PID/stat (hundredths of a second), or -1 when it cannot be read. */
    static long procCpuNanos(int pid) {
        if (pid <= 0) return -1;
        try {
            String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
            // The command name may hold spaces: count from the last ')' (utime is field 14).
            String[] f = stat.substring(stat.lastIndexOf(')') + 1).trim().split("\\s+");
            return (Long.parseLong(f[11]) + Long.parseLong(f[12])) * 10_000_000L;
        } catch (IOException | RuntimeException e) {
            return -1;
        }
    }

    /** This process's CPU time, in nanoseconds (every thread: the clients', the JIT's, the GC's). */
    static long selfCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    static void benchContended(String connect, String path, int clients, int total, int serverPid) throws Exception {
        List<CuratorFramework> cs = new ArrayList<>();
        for (int i = 0; i < clients; i++) cs.add(client(connect));
        AtomicLong remaining = new AtomicLong(total);
        // When the last counted acquisition was granted: the clock stops there, not when every
        // client has made its one uncounted acquisition more.
        AtomicLong done = new AtomicLong();
        long[] counts = new long[clients];
        List<Long> waits = Collections.synchronizedList(new ArrayList<>());
        List<Integer> order = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            final int id = i;
            InterProcessMutex m = new InterProcessMutex(cs.get(i), path);
            Thread t = new Thread(() -> {
                try {
                    go.await();
                    while (true) {
                        long t0 = System.nanoTime();
                        m.acquire();
                        long waited = System.nanoTime() - t0;
                        long nth = remaining.getAndDecrement();
                        if (nth == 1) done.set(System.nanoTime());
                        boolean more = nth > 0;
                        if (more) {
                            waits.add(waited);
                            order.add(id);
                            counts[id]++;
                        }
                        m.release();
                        if (!more) return;
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            t.start();
            threads.add(t);
        }
        // Warm the JVM (class loading, the JIT) on the recipe's paths before anything is
        // counted, as the Rust side runs compiled code from the start.
        InterProcessMutex warm = new InterProcessMutex(cs.get(0), path + "-warm");
        for (int i = 0; i < 200; i++) {
            warm.acquire();
            warm.release();
        }
        long server0 = procCpuNanos(serverPid), self0 = selfCpuNanos();
        long start = System.nanoTime();
        go.countDown();
        for (Thread t : threads) t.join();
        double secs = (done.get() - start) / 1e9;
        // CPU counts until the last client stopped, and so do the grants: each client's one
        // uncounted acquisition too.
        long server1 = procCpuNanos(serverPid), self1 = selfCpuNanos();
        double grants = total + clients;
        double serverUs = server0 < 0 || server1 < 0 ? -1 : (server1 - server0) / 1e3 / grants;
        double clientUs = (self1 - self0) / 1e3 / grants;
        List<Long> sorted = new ArrayList<>(waits);
        Collections.sort(sorted);
        long busiest = 0;
        for (long c : counts) busiest = Math.max(busiest, c);
        // FIFO: in a fair queue every client takes its turn once per round of `clients`.
        int rounds = 0, fair = 0;
        for (int i = 0; i + clients <= order.size(); i += clients) {
            rounds++;
            if (order.subList(i, i + clients).stream().distinct().count() == clients) fair++;
        }
        System.out.printf("contended ops_per_sec=%.1f p50_ms=%.2f p99_ms=%.2f busiest_share=%.3f fifo_rounds=%.3f server_cpu_us=%.1f client_cpu_us=%.1f%n",
                total / secs,
                sorted.get(sorted.size() / 2) / 1e6,
                sorted.get((int) (sorted.size() * 0.99)) / 1e6,
                (double) busiest / total,
                rounds == 0 ? 0.0 : (double) fair / rounds,
                serverUs,
                clientUs);
        for (CuratorFramework c : cs) c.close();
    }

    /** Leads PATH, prints LEADING, and waits to be killed (its session then times out). */
    static void latchLead(String connect, String path, int sessionMs) throws Exception {
        CuratorFramework c = client(connect, sessionMs);
        LeaderLatch latch = new LeaderLatch(c, path, "doomed");
        latch.start();
        latch.await();
        System.out.println("LEADING");
        System.out.flush();
        Thread.sleep(600_000);
    }

    static double p50(List<Long> nanos) {
        List<Long> sorted = new ArrayList<>(nanos);
        Collections.sort(sorted);
        return sorted.get(sorted.size() / 2) / 1e6;
    }

    /** The leader's id as an observer reads it (Curator has no observer: a cache's events). */
    static String leaderOf(LeaderLatch reader) {
        try {
            return reader.getLeader().getId();
        } catch (Exception e) {
            return "";
        }
    }

    /** Counts down the moment `latch` leads (its isLeader callback). */
    static CountDownLatch ledSignal(LeaderLatch latch) {
        CountDownLatch led = new CountDownLatch(1);
        latch.addListener(new LeaderLatchListener() {
            public void isLeader() { led.countDown(); }
            public void notLeader() {}
        });
        return led;
    }

    static void electionBench(String connect, String path, int rounds, int sessionMs) throws Exception {
        CuratorFramework a = client(connect, sessionMs), b = client(connect, sessionMs), o = client(connect, sessionMs);
        // The observer: a cache on the latch path; on every event it reads the leader.
        LeaderLatch reader = new LeaderLatch(o, path);
        AtomicReference<String> seen = new AtomicReference<>("");
        java.util.concurrent.ConcurrentHashMap<String, Long> seenAt = new java.util.concurrent.ConcurrentHashMap<>();
        CuratorCache cache =
                CuratorCache.build(o, path);
        cache.listenable().addListener((type, before, after) -> {
            String now = leaderOf(reader);
            if (!now.equals(seen.getAndSet(now))) seenAt.putIfAbsent(now, System.nanoTime());
        });
        cache.start();
        CuratorFramework[] clients = {a, b};
        LeaderLatch lead = new LeaderLatch(a, path, "c0");
        lead.start();
        lead.await();
        List<Long> handover = new ArrayList<>(), observe = new ArrayList<>();
        for (int round = 1; round <= rounds; round++) {
            String id = "c" + round;
            LeaderLatch next = new LeaderLatch(clients[round % 2], path, id);
            CountDownLatch led = ledSignal(next);
            next.start();
            Thread.sleep(30);
            long t0 = System.nanoTime();
            lead.close();
            if (!led.await(30, TimeUnit.SECONDS)) throw new IllegalStateException("no hand-over");
            handover.add(System.nanoTime() - t0);
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (!seenAt.containsKey(id)) {
                if (System.nanoTime() > deadline) throw new IllegalStateException("not observed");
                Thread.sleep(0, 100_000);
            }
            observe.add(seenAt.get(id) - t0);
            lead = next;
        }
        lead.close();
        // Failover: a leader process is SIGKILLed; its session times out, then the next leads.
        ProcessBuilder pb = new ProcessBuilder(
                ProcessHandle.current().info().command().orElse("java"),
                "-cp", System.getProperty("java.class.path"), "lockkit.interop.Main",
                "latch-lead", connect, path, Integer.toString(sessionMs));
        pb.redirectErrorStream(true);
        Process child = pb.start();
        java.io.BufferedReader out = new java.io.BufferedReader(new java.io.InputStreamReader(child.getInputStream()));
        String line;
        while ((line = out.readLine()) != null && !line.equals("LEADING")) {}
        LeaderLatch after = new LeaderLatch(b, path, "after");
        CountDownLatch led = ledSignal(after);
        after.start();
        Thread.sleep(100);
        child.destroyForcibly();
        long t0 = System.nanoTime();
        if (!led.await(60, TimeUnit.SECONDS)) throw new IllegalStateException("no failover");
        double failover = (System.nanoTime() - t0) / 1e6;
        after.close();
        cache.close();
        System.out.printf("election handover_p50_ms=%.2f observe_p50_ms=%.2f failover_ms=%.0f%n",
                p50(handover), p50(observe), failover);
        for (CuratorFramework c : new CuratorFramework[] {a, b, o}) c.close();
    }
}
