// Reference: boost::lockfree::spsc_queue between two threads, the figure Viewfinder's ring is
// compared with (Benchmarks/Report runs it in the same run). Prints million items per second.
// Build: g++ -O3 -march=x86-64-v3 -std=c++17 -pthread spsc_boost.cpp -o spsc_boost
#include <boost/lockfree/spsc_queue.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

int main(int argc, char **argv) {
    const long n = argc > 1 ? atol(argv[1]) : 100000000L;
    const int runs = argc > 2 ? atoi(argv[2]) : 5;
    double best = 0;
    for (int r = 0; r < runs; r++) {
        boost::lockfree::spsc_queue<long, boost::lockfree::capacity<1024>> q;
        auto t0 = std::chrono::steady_clock::now();
        std::thread producer([&] { for (long i = 0; i < n;) { if (q.push(i)) i++; } });
        long got = 0, sum = 0, v;
        while (got < n) { if (q.pop(v)) { sum += v; got++; } }
        producer.join();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double rate = n / s / 1e6;
        if (rate > best) best = rate;
        if (sum == 42) printf("!");
    }
    printf("%.1f\n", best);
    return 0;
}
