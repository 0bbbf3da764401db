package lockkit.interop;

import java.io.FileWriter;
import java.io.IOException;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RAtomicLong;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Takes a Redisson RLock ITER times and records each hold, while a lockkit peer does the same on
 * the same name. Usage: Main mutex REDIS_URL NAME ITER DIR
 *
 * Overlaps are detected with a shared counter in Redis (both sides increment it inside the
 * critical section and fail when it is not 1). Each hold appends "side acquired_ms released_ms"
 * to DIR/order.
 */
public final class Main {
    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String url = args[1];
        String name = args[2];
        int iter = Integer.parseInt(args[3]);
        String dir = args[4];
        if (!mode.equals("mutex")) {
            throw new IllegalArgumentException("unknown mode " + mode);
        }
        Config cfg = new Config();
        cfg.useSingleServer().setAddress(url);
        RedissonClient client = Redisson.create(cfg);
        try {
            // Start together: the JVM starts far slower than the Rust peer.
            RAtomicLong ready = client.getAtomicLong("{" + name + "}:interop-ready");
            ready.incrementAndGet();
            long waitUntil = System.currentTimeMillis() + 60_000;
            while (ready.get() < 2) {
                if (System.currentTimeMillis() > waitUntil) {
                    throw new IllegalStateException("the lockkit peer never started");
                }
                Thread.sleep(5);
            }
            RLock lock = client.getLock(name);
            RAtomicLong inside = client.getAtomicLong("{" + name + "}:interop-inside");
            for (int i = 0; i < iter; i++) {
                lock.lock();
                long acquired = System.currentTimeMillis();
                if (inside.incrementAndGet() != 1) {
                    System.err.println("OVERLAP: lockkit was inside while Redisson held the lock");
                    System.exit(3);
                }
                Thread.sleep(5);
                inside.decrementAndGet();
                long released = System.currentTimeMillis();
                append(dir + "/order", "java " + acquired + " " + released);
                lock.unlock();
                // Give the other side a chance to be waiting before we try again.
                Thread.sleep(2);
            }
        } finally {
            client.shutdown(0, 2, TimeUnit.SECONDS);
        }
    }

    private static synchronized void append(String path, String line) throws IOException {
        try (FileWriter w = new FileWriter(path, true)) {
            w.write(line + "\n");
        }
    }
}
