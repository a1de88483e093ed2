#include <cstdio>
int main() { std::puts("pipetune: under construction"); return 0; }
