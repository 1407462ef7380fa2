// The one-warp CTC kernel's multi-winner rounds (multi_rounds, decoders/include/ctc_warp_rounds.cuh: the code the
// kernel runs) on an emulated warp: 32 threads in lockstep, shuffles and ballots through shared buffers and a
// barrier. Each case builds a frame's candidates the way the kernel holds them (a stay, a last-char extension at
// a list position, an ordinary stream over a shared sorted list with merged positions and the last char removed,
// lanes >= nb empty, the reserved empty prefix's key) with heavy ties and -inf tails, and compares the winners in
// order with the sequential order (every candidate sorted by key desc, code asc; the first `beam`).
//   g++ -std=c++20 -O2 -pthread -Idecoders/include tests/cpp/warp_rounds_host.cpp -o /tmp/wr && /tmp/wr CASES SEED
// Prints "ok CASES cases, ROUNDS rounds, MAX max" or the first mismatch and exits 1.
#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "ctc_warp_rounds.cuh"

using namespace beamdec::ctc;

namespace {

// One barrier per warp operation: the values travel through two buffers used alternately, so a lane can only
// overwrite a buffer after every lane has passed the next operation's barrier, i.e. has read it.
struct Shared {
  std::barrier<> bar{32};
  unsigned long long slots[2][32];
};

struct ThreadWarp {
  Shared* sh;
  int lane;
  mutable int op = 0;
  unsigned long long exchange(unsigned long long v, int q) const {
    unsigned long long* buf = sh->slots[op++ & 1];
    buf[lane] = v;
    sh->bar.arrive_and_wait();
    return q >= 0 ? buf[q] : 0ull;
  }
  unsigned long long shfl(unsigned long long v, int q) const { return exchange(v, q); }
  unsigned ballot(bool p) const {
    const unsigned long long* buf = sh->slots[op & 1];
    exchange(p ? 1ull : 0ull, -1);
    unsigned m = 0;
    for (int i = 0; i < 32; ++i) m |= (buf[i] ? 1u : 0u) << i;
    return m;
  }
};

struct Lane {
  uint32_t k_stay = 0, k_last = 0, k_ord = 0;
  int lastpos = -1, oi = 0, oi2 = 0;
  float A = -INFINITY;
  OrdStream ord{0, 0, 0, 0};
};

struct Case {
  int nb, beam, cnt;
  std::vector<float> lps;
  Lane lanes[32];
  std::vector<int> want;
};

uint32_t key_at(const Case& c, int i, float A) {
  const float sc = (i < c.cnt ? c.lps[i] : 0.0f) + A;
  return i < c.cnt && sc != -INFINITY ? float_key(sc) : 0u;
}

Case make_case(std::mt19937& rng) {
  auto pick = [&](int n) { return (int)(rng() % (unsigned)n); };
  Case c;
  c.nb = 1 + pick(pick(4) == 0 ? 32 : 12);
  c.beam = std::max(c.nb, 1 + pick(32));
  if (pick(3) == 0) c.beam = 1 + pick(32);
  c.cnt = 1 + pick(65);
  const float levels[] = {-0.5f, -1.0f, -1.5f, -2.0f, -INFINITY};
  const int nlev = 2 + pick(3);
  for (int i = 0; i < c.cnt; ++i) c.lps.push_back(pick(4) ? levels[pick(nlev)] : -0.25f * (float)pick(40));
  std::sort(c.lps.begin(), c.lps.end(), [](float a, float b) { return a > b; });  // the list: lp desc
  std::vector<std::pair<unsigned long long, int>> pool;  // (composite, code)
  auto add = [&](uint32_t k, unsigned code) {
    if (k != 0u) pool.push_back({((unsigned long long)k << 32) | (0xFFFFFFFFu - code), (int)code});
  };
  for (int j = 0; j < c.nb; ++j) {
    Lane& L = c.lanes[j];
    const float As[] = {0.0f, -0.5f, -1.0f, -INFINITY};
    L.A = As[pick(pick(5) == 0 ? 4 : 3)];
    const float stays[] = {-0.5f, -1.0f, -1.5f, -2.5f};
    L.k_stay = pick(6) == 0 ? 0u : float_key(stays[pick(4)] + (pick(2) ? L.A : 0.0f));
    if (j == 0 && pick(8) == 0) L.k_stay = 0xFFFFFFFFu;  // the reserved empty prefix of a first frame
    const bool can_ext = pick(8) != 0 && L.A != -INFINITY;
    unsigned rem[3] = {0u, 0u, 0u};
    if (can_ext) {
      for (int i = 0; i < c.cnt; ++i)
        if (pick(5) != 0) rem[i >> 5] |= 1u << (i & 31);  // the others merged into another beam
      if (pick(2)) {
        L.lastpos = pick(c.cnt);
        rem[L.lastpos >> 5] &= ~(1u << (L.lastpos & 31));
        const float sc = c.lps[L.lastpos] + (pick(2) ? L.A : -1.0f);
        L.k_last = sc == -INFINITY ? 0u : float_key(sc);
      }
    }
    L.ord = OrdStream{rem[0], rem[1], rem[2], c.cnt};
    for (int i = 0; i < c.cnt; ++i)
      if ((rem[i >> 5] >> (i & 31)) & 1u) add(key_at(c, i, L.A), kSelExt | (unsigned)j << 8 | (unsigned)i);
    add(L.k_stay, (unsigned)j);
    add(L.k_last, kSelExt | (unsigned)j << 8 | (unsigned)(L.lastpos & 0xFF));
    // the kernel's set-up: the current ordinary extension (key) and the one after it (position)
    L.oi = L.ord.pop_sel(true);
    L.k_ord = key_at(c, L.oi, L.A);
    L.oi2 = L.oi < c.cnt ? L.ord.pop_sel(true) : c.cnt;
  }
  std::sort(pool.begin(), pool.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int r = 0; r < c.beam && r < (int)pool.size(); ++r) c.want.push_back(pool[r].second);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
  const unsigned seed = argc > 2 ? (unsigned)std::atoi(argv[2]) : 1u;
  std::mt19937 rng(seed);
  std::vector<Case> cases;
  for (int i = 0; i < n; ++i) cases.push_back(make_case(rng));
  Shared sh;
  std::vector<int> got_nw(n);
  std::vector<std::vector<int>> got(n, std::vector<int>(32, -1));
  std::vector<std::thread> threads;
  for (int lane = 0; lane < 32; ++lane)
    threads.emplace_back([&, lane] {
      const ThreadWarp w{&sh, lane};
      for (int i = 0; i < n; ++i) {
        Case& c = cases[i];
        Lane L = c.lanes[lane];
        const int nw = multi_rounds(w, lane, c.nb, c.beam, L.k_stay, L.k_last, L.lastpos, L.k_ord, L.oi, L.oi2,
                                    L.ord, c.lps.data(), L.A, got[i].data());
        if (lane == 0) got_nw[i] = nw;
        sh.bar.arrive_and_wait();
      }
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    const Case& c = cases[i];
    const std::vector<int> g(got[i].begin(), got[i].begin() + got_nw[i]);
    if (g != c.want) {
      std::printf("case %d (nb %d beam %d cnt %d): got %zu winners, want %zu\n", i, c.nb, c.beam, c.cnt, g.size(),
                  c.want.size());
      for (size_t r = 0; r < std::max(g.size(), c.want.size()); ++r)
        std::printf("  %zu: got %d want %d\n", r, r < g.size() ? g[r] : -1, r < c.want.size() ? c.want[r] : -1);
      return 1;
    }
  }
  std::printf("ok %d cases\n", n);
  return 0;
}
