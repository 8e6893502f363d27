/* Outputs of `zgate bench`: a JSON file with every measurement, and a PNG chart (achieved
 * GB/s against the ceiling of the same run, per configuration, one panel per backend) drawn
 * by gnuplot from a data file and a script written next to the PNG. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, isatty, access under -std=c11 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f), fputc(*s, f);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned char)*s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (v != v || v > 1e300 || v < -1e300) fputs("null", f);
  else fprintf(f, "%.6g", v);
}

const char *cli_bench_flag(const bench_result *r) {
  if (r->error[0]) return "";
  int noisy = r->time_s[2] > BENCH_NOISY_SPREAD * r->time_s[1] || r->ceiling_s[2] > BENCH_NOISY_SPREAD * r->ceiling_s[1];
  int above = r->pct[0] > BENCH_MAX_PLAUSIBLE_PCT;
  return noisy && above ? "noisy, above ceiling" : noisy ? "noisy" : above ? "above ceiling" : "";
}

/* The dtype column: one type, or "mixed" (the JSON has every tensor's). */
static void dtype_cell(const bench_result *r, char *buf, size_t n) {
  cli_op_dtypes_str(&r->dt, r->op[0] == 'f', buf, n);
  if (strchr(buf, ' ')) snprintf(buf, n, "mixed");
}

/* "v (lo..hi)" of a figure of three. */
static const char *range_cell(char *buf, size_t n, const double v[3], double scale) {
  snprintf(buf, n, "%.1f (%.1f..%.1f)", v[0] * scale, v[1] * scale, v[2] * scale);
  return buf;
}

static void print_variants(const bench_result *r, int n);

void cli_bench_print_table(const bench_result *r, int n, const bench_meta *m) {
  printf("%-10s %-3s %-22s %-8s %-8s %9s  %-30s %-20s %-20s %-21s %s\n", "backend", "op", "shape", "dtype", "layout",
         "MB moved", "median us (fastest..slowest)", "GB/s (range)", "ceil GB/s (range)", "% ceil (range)", "flag");
  int nflag = 0;
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    char shape[64], dts[64], c1[48], c2[48], c3[48], c4[48];
    cli_shape_str(x->shape, shape, sizeof shape);
    dtype_cell(x, dts, sizeof dts);
    if (x->error[0]) {
      printf("%-10s %-3s %-22s %-8s %-8s %s\n", x->backend, x->op, shape, dts, cli_layout_names[x->layout], x->error);
      continue;
    }
    const char *flag = cli_bench_flag(x);
    nflag += flag[0] != 0;
    printf("%-10s %-3s %-22s %-8s %-8s %9.1f  %-30s %-20s %-20s %-21s %s\n", x->backend, x->op, shape, dts,
           cli_layout_names[x->layout], x->bytes / 1e6, range_cell(c1, sizeof c1, x->time_s, 1e6),
           range_cell(c2, sizeof c2, x->gbps, 1.0), range_cell(c3, sizeof c3, x->ceiling_gbps, 1.0),
           range_cell(c4, sizeof c4, x->pct, 1.0), flag);
  }
  printf("(ranges: lowest..highest over the timed calls; %% ceil's pairs zgate's slowest call with the ceiling's fastest and back)\n");
  if (nflag)
    printf("%d of %d rows flagged: 'noisy' = the slowest timed call (zgate's or the ceiling's) took more than %.2fx "
           "the fastest; 'above ceiling' = over %.0f%% of the ceiling, which a memory-bound operator cannot reach. "
           "The machine was busy (load average at start: %.2f on %d CPUs): rerun on a quiet one.\n",
           nflag, n, BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT, m->have_load ? m->load[0] : -1.0, m->cpus);
  if (m->settle_asked && !m->settled)
    printf("The machine did not settle within %.0f s (load average %.2f on %d CPUs): the figures may be low.\n",
           m->settle_wait_s, m->load[0], m->cpus);
  print_variants(r, n);
}

/* The CPU ceiling's variants: a legend, then each CPU row's median GB/s of every variant. */
static void print_variants(const bench_result *r, int n) {
  int nv = 0;
  for (int i = 0; i < n; i++)
    if (!r[i].is_cuda && !r[i].error[0] && r[i].nvariants > nv) nv = r[i].nvariants;
  if (!nv) return;
  printf("\nCPU ceiling: the fastest of %d stream variants on each row's buffers, timed round robin "
         "(median GB/s; * the ceiling, - not usable on these buffers):\n", nv);
  for (int v = 0; v < nv; v++) printf("  v%-2d %s\n", v + 1, zb_variant_name(v));
  printf("%-10s %-3s %-22s %-8s %-8s", "backend", "op", "shape", "dtype", "layout");
  for (int v = 0; v < nv; v++) {
    char h[16];
    snprintf(h, sizeof h, "v%d", v + 1);
    printf("  %6s ", h);
  }
  printf("\n");
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    if (x->is_cuda || x->error[0] || !x->nvariants) continue;
    char shape[64], dts[64];
    cli_shape_str(x->shape, shape, sizeof shape);
    dtype_cell(x, dts, sizeof dts);
    printf("%-10s %-3s %-22s %-8s %-8s", x->backend, x->op, shape, dts, cli_layout_names[x->layout]);
    for (int v = 0; v < x->nvariants; v++) {
      if (x->variant_gbps[v][0] < 0) printf("  %6s ", "-");
      else printf("  %6.1f%s", x->variant_gbps[v][0], v == x->ceiling_variant ? "*" : " ");
    }
    printf("\n");
  }
}

static void json_num3(FILE *f, const char *name, const double v[3], double scale) {
  fprintf(f, ", \"%s\": ", name);
  json_num(f, v[0] * scale);
  fprintf(f, ", \"%s_range\": [", name);
  json_num(f, v[1] * scale);
  fputs(", ", f);
  json_num(f, v[2] * scale);
  fputc(']', f);
}

int cli_bench_write_json(const char *path, const bench_result *r, int n, const bench_meta *m) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "{\n  \"tool\": \"zgate bench\",\n  \"zgate_version\": ");
  json_str(f, zgate_version());
  fprintf(f, ",\n  \"build\": ");
  json_str(f, zgate_build_info());
  fprintf(f, ",\n  \"date\": ");
  json_str(f, m->date);
  fprintf(f, ",\n  \"cpu_threads\": %d,\n  \"load_average_at_start\": ", m->threads);
  if (m->have_load) fprintf(f, "[%.2f, %.2f, %.2f]", m->load[0], m->load[1], m->load[2]);
  else fputs("null", f);
  fprintf(f, ",\n  \"cpus_online\": %d,\n  \"settle\": ", m->cpus);
  if (m->settle_asked) fprintf(f, "{\"waited_s\": %.1f, \"settled\": %s}", m->settle_wait_s, m->settled ? "true" : "false");
  else fputs("null", f);
  fprintf(f, ",\n  \"ceiling\": {\"cpu\": ");
  json_str(f, m->ceiling_cpu);
  fprintf(f, ", \"cuda\": ");
  json_str(f, m->ceiling_cuda);
  fprintf(f, "},\n  \"bytes_counted\": \"bytes read plus bytes written by the operator, once each\",\n");
  fprintf(f, "  \"ranges\": \"[lowest, highest] over the timed calls; pct_of_ceiling's pairs zgate's slowest call "
             "with the ceiling's fastest and back\",\n");
  fprintf(f, "  \"flags\": \"noisy: the slowest timed call (zgate's or the ceiling's) took more than %.2fx the "
             "fastest; above ceiling: over %.0f%% of the ceiling\",\n", BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT);
  fprintf(f, "  \"results\": [");
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    fprintf(f, "%s\n    {\"backend\": ", i ? "," : "");
    json_str(f, x->backend);
    fprintf(f, ", \"op\": \"%s\", \"shape\": [%lld, %lld, %lld, %lld], \"dtypes\": {", x->op,
            (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2], (long long)x->shape[3]);
    if (x->op[0] == 'f')
      fprintf(f, "\"o\": \"%s\", \"z\": \"%s\", \"out\": \"%s\"", cli_dtype_name(x->dt.t[CLI_O]),
              cli_dtype_name(x->dt.t[CLI_Z]), cli_dtype_name(x->dt.t[CLI_DZ]));
    else
      for (int t = 0; t < CLI_NT; t++)
        fprintf(f, "%s\"%s\": \"%s\"", t ? ", " : "", cli_tensor_names[t], cli_dtype_name(x->dt.t[t]));
    fprintf(f, "}, \"layout\": \"%s\", \"elements\": %lld, \"bytes\": %.0f, \"repeats\": %d, \"threads\": %d",
            cli_layout_names[x->layout], (long long)x->elements, x->bytes, x->repeats, x->threads);
    if (x->error[0]) {
      fprintf(f, ", \"error\": ");
      json_str(f, x->error);
      fputc('}', f);
      continue;
    }
    fprintf(f, ",\n     \"first_call_us\": ");
    json_num(f, x->first_s * 1e6);
    json_num3(f, "median_us", x->time_s, 1e6);
    json_num3(f, "gbps", x->gbps, 1.0);
    fputs("\n    ", f);
    json_num3(f, "ceiling_median_us", x->ceiling_s, 1e6);
    json_num3(f, "ceiling_gbps", x->ceiling_gbps, 1.0);
    json_num3(f, "pct_of_ceiling", x->pct, 1.0);
    if (x->ceiling_variant >= 0) {
      fprintf(f, ",\n     \"ceiling_variant\": ");
      json_str(f, zb_variant_name(x->ceiling_variant));
      fprintf(f, ", \"ceiling_variants\": [");
      for (int v = 0; v < x->nvariants; v++) {
        fprintf(f, "%s{\"name\": ", v ? ", " : "");
        json_str(f, zb_variant_name(v));
        if (x->variant_gbps[v][0] < 0) fprintf(f, ", \"usable\": false}");
        else {
          json_num3(f, "gbps", x->variant_gbps[v], 1.0);
          fputc('}', f);
        }
      }
      fputc(']', f);
    }
    fprintf(f, ", \"flag\": ");
    json_str(f, cli_bench_flag(x));
    fputc('}', f);
  }
  fprintf(f, "\n  ]\n}\n");
  int bad = ferror(f);
  return (fclose(f) || bad) ? -1 : 0;
}

/* The gnuplot executable on PATH, or NULL. */
static char *find_gnuplot(void) {
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  while (*path) {
    const char *end = strchr(path, ':');
    size_t n = end ? (size_t)(end - path) : strlen(path);
    char *cand = malloc(n + 10);
    if (!cand) return NULL;
    memcpy(cand, n ? path : ".", n ? n : 1);
    strcpy(cand + (n ? n : 1), "/gnuplot");
    if (access(cand, X_OK) == 0) return cand;
    free(cand);
    path = end ? end + 1 : path + n;
  }
  return NULL;
}

/* A path safe to put between single quotes in a shell command and a gnuplot string. */
static int quotable(const char *s) {
  for (; *s; s++)
    if (*s == '\'' || *s == '"' || *s == '\n' || *s == '\\') return 0;
  return 1;
}

int cli_bench_check_png(const char *png_path) {
  if (!quotable(png_path)) {
    cli_error("bench", "--png %s: the path contains quotes or backslashes, which gnuplot cannot take; choose another",
              png_path);
    return -1;
  }
  return cli_check_output("bench", "--png", png_path);
}

int cli_bench_plot(const char *png_path, const bench_result *r, int n, const bench_meta *m) {
  size_t len = strlen(png_path);
  char *base = malloc(len + 8);
  if (!base) return -1;
  memcpy(base, png_path, len + 1);
  if (len > 4 && !strcmp(base + len - 4, ".png")) base[len - 4] = '\0';
  char *dat = malloc(len + 8), *gp = malloc(len + 8);
  if (!dat || !gp) {
    free(base), free(dat), free(gp);
    return -1;
  }
  sprintf(dat, "%s.dat", base);
  sprintf(gp, "%s.gp", base);

  /* One data block per backend (gnuplot's "index"), in order of first appearance. */
  const char *panels[CLI_MAX_BACKENDS];
  int npanels = 0, maxrows = 0, nflag = 0;
  unsigned layouts = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int k = 0; k < npanels; k++) seen |= !strcmp(panels[k], r[i].backend);
    if (!seen && npanels < CLI_MAX_BACKENDS) panels[npanels++] = r[i].backend;
  }
  FILE *f = fopen(dat, "w");
  if (!f) {
    cli_error("bench", "cannot write '%s'", dat);
    free(base), free(dat), free(gp);
    return -1;
  }
  fprintf(f, "# zgate bench: label, GB/s (median, lowest, highest), ceiling GB/s (the same), bar label\n");
  for (int k = 0; k < npanels; k++) {
    int rows = 0;
    fprintf(f, "# %s\n", panels[k]);
    for (int i = 0; i < n; i++) {
      const bench_result *x = &r[i];
      if (strcmp(x->backend, panels[k]) || x->error[0]) continue;
      char dts[64];
      dtype_cell(x, dts, sizeof dts);
      const char *flag = cli_bench_flag(x);
      nflag += flag[0] != 0;
      layouts |= 1u << x->layout;
      fprintf(f, "\"%s %s %s %lldx%lldx%lldx%lld\" %.4g %.4g %.4g %.4g %.4g %.4g \"%.0f%%%s%s\"\n", x->op, dts,
              cli_layout_names[x->layout], (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2],
              (long long)x->shape[3], x->gbps[0], x->gbps[1], x->gbps[2], x->ceiling_gbps[0], x->ceiling_gbps[1],
              x->ceiling_gbps[2], x->pct[0], flag[0] ? " ! " : "", flag);
      rows++;
    }
    if (rows > maxrows) maxrows = rows;
    fprintf(f, "\n\n");
  }
  fclose(f);

  f = fopen(gp, "w");
  if (!f) {
    cli_error("bench", "cannot write '%s'", gp);
    free(base), free(dat), free(gp);
    return -1;
  }
  /* The title says what the bars, whiskers and marks are, and what each layout name means. */
  int nlines = 2 + m->have_load + m->settle_asked;
  char title[2048];
  size_t tl = (size_t)snprintf(title, sizeof title,
                               "zgate %s: achieved bandwidth vs the ceiling measured in the same run (%s)\\n"
                               "bars: median of the timed calls; whiskers: their lowest..highest; '!': the calls "
                               "spread more than %.2fx (noisy) or the row is above %.0f%% of its ceiling",
                               zgate_version(), m->date, BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT);
  if (m->have_load && tl < sizeof title)
    tl += (size_t)snprintf(title + tl, sizeof title - tl, "\\nload average at start: %.2f %.2f %.2f on %d CPUs%s",
                           m->load[0], m->load[1], m->load[2], m->cpus,
                           nflag ? ": the machine was busy, so the flagged rows are not to be trusted" : "");
  if (m->settle_asked && tl < sizeof title)
    tl += (size_t)snprintf(title + tl, sizeof title - tl, "\\n%s after waiting %.0f s for the load to fall",
                           m->settled ? "the machine settled" : "THE MACHINE DID NOT SETTLE (figures may be low)",
                           m->settle_wait_s);
  for (int i = 0; i < CLI_NLAYOUTS; i++)
    if ((layouts >> i & 1u) && tl < sizeof title) {
      tl += (size_t)snprintf(title + tl, sizeof title - tl, "\\n%s: %s", cli_layout_names[i], cli_layout_about[i]);
      nlines++;
    }
  int width = 360 + 95 * (maxrows > 4 ? maxrows : 4);
  if (width < 900) width = 900; /* room for the title */
  if (width > 2400) width = 2400;
  fprintf(f, "# gnuplot script written by 'zgate bench'; run: gnuplot '%s'\n", gp);
  fprintf(f, "set terminal pngcairo size %d,%d font 'DejaVu Sans,10' noenhanced\n", width, 140 + 16 * nlines + 420 * npanels);
  fprintf(f, "set output '%s'\n", png_path);
  fprintf(f, "set multiplot layout %d,1 title \"%s\"\n", npanels > 0 ? npanels : 1, title);
  fprintf(f, "set style fill solid 0.9 border rgb '#333333'\nset boxwidth 0.38\nset grid ytics lc rgb '#dddddd'\n");
  fprintf(f, "set ylabel 'GB/s (bytes read + written)'\nset yrange [0:*]\nset offsets 0.6, 0.6, 0, 0\n");
  fprintf(f, "set xtics rotate by 25 right nomirror font ',9'\nset key top left opaque box\nset bmargin 8\nset lmargin 16\n");
  for (int k = 0; k < npanels; k++) {
    int is_cuda = !strncmp(panels[k], "cuda", 4);
    if (is_cuda) fprintf(f, "set title '%s (ceiling: %s)'\n", panels[k], m->ceiling_cuda);
    else fprintf(f, "set title '%s, %d threads (ceiling: %s)'\n", panels[k], m->threads, m->ceiling_cpu);
    fprintf(f,
            "plot '%s' index %d using ($0-0.2):2 with boxes lc rgb '#2b6cb0' title 'zgate', \\\n"
            "     '' index %d using ($0+0.2):5 with boxes lc rgb '#c8c8c8' title 'ceiling', \\\n"
            "     '' index %d using ($0-0.2):2:3:4 with yerrorbars lc rgb '#000000' ps 0 title 'lowest..highest', \\\n"
            "     '' index %d using ($0+0.2):5:6:7 with yerrorbars lc rgb '#000000' ps 0 notitle, \\\n"
            "     '' index %d using ($0-0.2):4:8 with labels offset 0,0.8 font ',9' notitle, \\\n"
            "     '' index %d using 0:(0):xtic(1) with points ps 0 notitle\n",
            dat, k, k, k, k, k, k);
  }
  fprintf(f, "unset multiplot\n");
  fclose(f);

  int rc;
  char *gnuplot = find_gnuplot();
  if (!gnuplot) {
    fprintf(stderr, "zgate bench: gnuplot not found, so no chart was drawn; wrote %s and %s "
                    "(install gnuplot-nox, then run: gnuplot '%s')\n", dat, gp, gp);
    rc = 1;
  } else if (!quotable(gnuplot)) {
    fprintf(stderr, "zgate bench: cannot run gnuplot from '%s'\n", gnuplot);
    rc = -1;
  } else {
    size_t cl = strlen(gnuplot) + strlen(gp) + 32;
    char *cmdline = malloc(cl);
    rc = -1;
    if (cmdline) {
      snprintf(cmdline, cl, "'%s' '%s'", gnuplot, gp);
      int st = system(cmdline);
      if (st == 0 && access(png_path, R_OK) == 0) rc = 0;
      else fprintf(stderr, "zgate bench: gnuplot failed on %s (exit status %d); the data is in %s\n", gp, st, dat);
      free(cmdline);
    }
  }
  free(gnuplot), free(base), free(dat), free(gp);
  return rc;
}
