/* The `zgate` command: self-check, benchmark and build information for libzgate. `zgate info`
 * is here; check and bench have their own files. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* `zgate info`: version, CPU paths built / runnable / chosen, threads, CUDA build and devices. */
static int cmd_info(int argc, char **argv) {
  static const struct option opts[] = {{"help", 0, NULL, 'h'}, {0}};
  cli_cfg cfg = {.cmd = "info"};
  int pr = cli_parse(&cfg, argc, argv, opts);
  if (pr < 0) {
    printf("usage: zgate info\n"
           "\n"
           "Prints zgate's version, the CPU paths built into it, which of them this machine can\n"
           "run and which one is chosen by default (ZGATE_CPU_ISA overrides the choice), the\n"
           "OpenMP thread count, and whether CUDA is built in, with the devices found.\n");
    return CLI_EXIT_OK;
  }
  if (pr) return pr;
  printf("zgate %s (tool built against header %s)\n", zgate_version(), ZGATE_VERSION_STRING);
  printf("build:              %s\n", zgate_build_info());
  printf("CPU paths built:    %s\n", zgate_cpu_isas_built());
  printf("CPU paths runnable:");
  for (int i = 0; i < 4; i++)
    if (zgate_cpu_isa_available(cli_cpu_isas[i])) printf(" %s", cli_cpu_isas[i]);
  printf("\n");
  const char *env = getenv("ZGATE_CPU_ISA"), *chosen = zgate_cpu_isa_chosen();
  if (strstr(chosen, "ZGATE_CPU_ISA")) printf("CPU path chosen:    %s\n", chosen);
  else printf("CPU path chosen:    %s%s%s%s\n", chosen, env ? " (ZGATE_CPU_ISA=" : " (best available)", env ? env : "",
              env ? ")" : "");
  if (!zgate_cpu_isa_available(chosen))
    printf("                    (calls without opts.cpu_isa will fail: set ZGATE_CPU_ISA to a runnable path, or unset it)\n");
  printf("CPU threads:        %d (OpenMP default; OMP_NUM_THREADS or --threads change it)\n", cli_max_threads());
  if (!zgate_cuda_built()) {
    printf("CUDA:               not built into this zgate\n");
  } else {
    char buf[256];
    int n = cli_cuda_device_count();
    cli_cuda_describe(-1, buf, sizeof buf);
    if (n) printf("CUDA:               built; %s; %d device%s\n", buf, n, n == 1 ? "" : "s");
    else printf("CUDA:               built; %s; no devices (%s)\n", buf, cli_cuda_last_error());
    for (int d = 0; d < n; d++) {
      cli_cuda_describe(d, buf, sizeof buf);
      printf("  %s\n", buf);
    }
  }
  if (strcmp(zgate_version(), ZGATE_VERSION_STRING) != 0) {
    cli_error("info", "the library (%s) and the header this tool was built with (%s) differ", zgate_version(),
              ZGATE_VERSION_STRING);
    return CLI_EXIT_FAIL;
  }
  return CLI_EXIT_OK;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: zgate <command> [options]\n"
          "\n"
          "zgate computes Mamba-3's SiLU output gate and its backward on CPUs and NVIDIA GPUs.\n"
          "\n"
          "commands:\n"
          "  info    version, CPU paths built / runnable / chosen, CUDA devices\n"
          "  check   precision suite on every backend and CPU path vs the float64 reference;\n"
          "          writes a Markdown report\n"
          "  bench   bandwidth suite: time, GB/s and %% of a ceiling measured in the same run,\n"
          "          each with its range over the timed calls; writes JSON and a PNG chart\n"
          "\n"
          "exit codes: 0 all ran and passed; 1 a check failed or zgate returned an error; 2 bad\n"
          "options or an output path that cannot be written (nothing run); 3 something asked\n"
          "for did not run (not enough memory, no device) and nothing failed.\n"
          "'zgate <command> --help' describes each command's options.\n");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach a log as they are printed */
  if (argc < 2) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (!strcmp(cmd, "--version")) {
    printf("zgate %s\n", zgate_version());
    return CLI_EXIT_OK;
  }
  if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "check")) return cli_cmd_check(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cli_cmd_bench(argc - 1, argv + 1);
  fprintf(stderr, "zgate: unknown command '%s' (commands: info, check, bench; see 'zgate --help')\n", cmd);
  return CLI_EXIT_USAGE;
}
