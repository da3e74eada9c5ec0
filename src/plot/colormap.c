/*
 * colormap.c: builds matplotlib's colour tables from their published data
 * and maps values through them.
 *
 * Data structure: one static al_cmap per map, filled once (pthread_once)
 * from the anchor tables below:
 *   - viridis: the 256 listed colours, _viridis_data in matplotlib's
 *     lib/matplotlib/_cm_listed.py (Nathaniel J. Smith, Stefan van der Walt
 *     and Eric Firing; CC0); used as is.
 *   - RdYlBu: the 11 ColorBrewer anchor colours, _RdYlBu_data in
 *     lib/matplotlib/_cm.py (ColorBrewer's 0-255 triples divided by 255),
 *     placed at numpy.linspace(0, 1, 11) as LinearSegmentedColormap.
 *     from_list does. Colors from www.ColorBrewer.org by Cynthia A. Brewer.
 *     ColorBrewer colour schemes: Copyright (c) 2002 Cynthia Brewer, Mark
 *     Harrower, and The Pennsylvania State University; Apache-style licence
 *     (Apache License 2.0 in current releases), whose notice, conditions
 *     and disclaimer are reproduced in docs/figures.md. This product
 *     includes color specifications and designs developed by Cynthia
 *     Brewer (http://colorbrewer.org/).
 *   - coolwarm: Kenneth Moreland's diverging map, _coolwarm_data in _cm.py
 *     (33 control points at i/32, from his CoolWarmFloat33 table).
 *   - *_r: reversed the way LinearSegmentedColormap.reversed() does it, by
 *     mirroring the segment data (x -> 1 - x) and sampling again, which is
 *     not always bit-identical to reading the forward table backwards (one
 *     byte of RdYlBu_r differs), so the reversal is done on the segments.
 * Sampling to N = 256 follows matplotlib's colors._create_lookup_table in
 * double precision, operation for operation, so that the truncated bytes
 * come out identical; products are kept apart from sums (no fused
 * multiply-add, which -ffp-contract=fast would otherwise allow) because a
 * last-bit difference can move a value across an integer after * 255.
 */
#include "colormap.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* matplotlib lib/matplotlib/_cm_listed.py, _viridis_data (CC0). */
static const double viridis_data[256][3] = {
    {0.267004, 0.004874, 0.329415},
    {0.268510, 0.009605, 0.335427},
    {0.269944, 0.014625, 0.341379},
    {0.271305, 0.019942, 0.347269},
    {0.272594, 0.025563, 0.353093},
    {0.273809, 0.031497, 0.358853},
    {0.274952, 0.037752, 0.364543},
    {0.276022, 0.044167, 0.370164},
    {0.277018, 0.050344, 0.375715},
    {0.277941, 0.056324, 0.381191},
    {0.278791, 0.062145, 0.386592},
    {0.279566, 0.067836, 0.391917},
    {0.280267, 0.073417, 0.397163},
    {0.280894, 0.078907, 0.402329},
    {0.281446, 0.084320, 0.407414},
    {0.281924, 0.089666, 0.412415},
    {0.282327, 0.094955, 0.417331},
    {0.282656, 0.100196, 0.422160},
    {0.282910, 0.105393, 0.426902},
    {0.283091, 0.110553, 0.431554},
    {0.283197, 0.115680, 0.436115},
    {0.283229, 0.120777, 0.440584},
    {0.283187, 0.125848, 0.444960},
    {0.283072, 0.130895, 0.449241},
    {0.282884, 0.135920, 0.453427},
    {0.282623, 0.140926, 0.457517},
    {0.282290, 0.145912, 0.461510},
    {0.281887, 0.150881, 0.465405},
    {0.281412, 0.155834, 0.469201},
    {0.280868, 0.160771, 0.472899},
    {0.280255, 0.165693, 0.476498},
    {0.279574, 0.170599, 0.479997},
    {0.278826, 0.175490, 0.483397},
    {0.278012, 0.180367, 0.486697},
    {0.277134, 0.185228, 0.489898},
    {0.276194, 0.190074, 0.493001},
    {0.275191, 0.194905, 0.496005},
    {0.274128, 0.199721, 0.498911},
    {0.273006, 0.204520, 0.501721},
    {0.271828, 0.209303, 0.504434},
    {0.270595, 0.214069, 0.507052},
    {0.269308, 0.218818, 0.509577},
    {0.267968, 0.223549, 0.512008},
    {0.266580, 0.228262, 0.514349},
    {0.265145, 0.232956, 0.516599},
    {0.263663, 0.237631, 0.518762},
    {0.262138, 0.242286, 0.520837},
    {0.260571, 0.246922, 0.522828},
    {0.258965, 0.251537, 0.524736},
    {0.257322, 0.256130, 0.526563},
    {0.255645, 0.260703, 0.528312},
    {0.253935, 0.265254, 0.529983},
    {0.252194, 0.269783, 0.531579},
    {0.250425, 0.274290, 0.533103},
    {0.248629, 0.278775, 0.534556},
    {0.246811, 0.283237, 0.535941},
    {0.244972, 0.287675, 0.537260},
    {0.243113, 0.292092, 0.538516},
    {0.241237, 0.296485, 0.539709},
    {0.239346, 0.300855, 0.540844},
    {0.237441, 0.305202, 0.541921},
    {0.235526, 0.309527, 0.542944},
    {0.233603, 0.313828, 0.543914},
    {0.231674, 0.318106, 0.544834},
    {0.229739, 0.322361, 0.545706},
    {0.227802, 0.326594, 0.546532},
    {0.225863, 0.330805, 0.547314},
    {0.223925, 0.334994, 0.548053},
    {0.221989, 0.339161, 0.548752},
    {0.220057, 0.343307, 0.549413},
    {0.218130, 0.347432, 0.550038},
    {0.216210, 0.351535, 0.550627},
    {0.214298, 0.355619, 0.551184},
    {0.212395, 0.359683, 0.551710},
    {0.210503, 0.363727, 0.552206},
    {0.208623, 0.367752, 0.552675},
    {0.206756, 0.371758, 0.553117},
    {0.204903, 0.375746, 0.553533},
    {0.203063, 0.379716, 0.553925},
    {0.201239, 0.383670, 0.554294},
    {0.199430, 0.387607, 0.554642},
    {0.197636, 0.391528, 0.554969},
    {0.195860, 0.395433, 0.555276},
    {0.194100, 0.399323, 0.555565},
    {0.192357, 0.403199, 0.555836},
    {0.190631, 0.407061, 0.556089},
    {0.188923, 0.410910, 0.556326},
    {0.187231, 0.414746, 0.556547},
    {0.185556, 0.418570, 0.556753},
    {0.183898, 0.422383, 0.556944},
    {0.182256, 0.426184, 0.557120},
    {0.180629, 0.429975, 0.557282},
    {0.179019, 0.433756, 0.557430},
    {0.177423, 0.437527, 0.557565},
    {0.175841, 0.441290, 0.557685},
    {0.174274, 0.445044, 0.557792},
    {0.172719, 0.448791, 0.557885},
    {0.171176, 0.452530, 0.557965},
    {0.169646, 0.456262, 0.558030},
    {0.168126, 0.459988, 0.558082},
    {0.166617, 0.463708, 0.558119},
    {0.165117, 0.467423, 0.558141},
    {0.163625, 0.471133, 0.558148},
    {0.162142, 0.474838, 0.558140},
    {0.160665, 0.478540, 0.558115},
    {0.159194, 0.482237, 0.558073},
    {0.157729, 0.485932, 0.558013},
    {0.156270, 0.489624, 0.557936},
    {0.154815, 0.493313, 0.557840},
    {0.153364, 0.497000, 0.557724},
    {0.151918, 0.500685, 0.557587},
    {0.150476, 0.504369, 0.557430},
    {0.149039, 0.508051, 0.557250},
    {0.147607, 0.511733, 0.557049},
    {0.146180, 0.515413, 0.556823},
    {0.144759, 0.519093, 0.556572},
    {0.143343, 0.522773, 0.556295},
    {0.141935, 0.526453, 0.555991},
    {0.140536, 0.530132, 0.555659},
    {0.139147, 0.533812, 0.555298},
    {0.137770, 0.537492, 0.554906},
    {0.136408, 0.541173, 0.554483},
    {0.135066, 0.544853, 0.554029},
    {0.133743, 0.548535, 0.553541},
    {0.132444, 0.552216, 0.553018},
    {0.131172, 0.555899, 0.552459},
    {0.129933, 0.559582, 0.551864},
    {0.128729, 0.563265, 0.551229},
    {0.127568, 0.566949, 0.550556},
    {0.126453, 0.570633, 0.549841},
    {0.125394, 0.574318, 0.549086},
    {0.124395, 0.578002, 0.548287},
    {0.123463, 0.581687, 0.547445},
    {0.122606, 0.585371, 0.546557},
    {0.121831, 0.589055, 0.545623},
    {0.121148, 0.592739, 0.544641},
    {0.120565, 0.596422, 0.543611},
    {0.120092, 0.600104, 0.542530},
    {0.119738, 0.603785, 0.541400},
    {0.119512, 0.607464, 0.540218},
    {0.119423, 0.611141, 0.538982},
    {0.119483, 0.614817, 0.537692},
    {0.119699, 0.618490, 0.536347},
    {0.120081, 0.622161, 0.534946},
    {0.120638, 0.625828, 0.533488},
    {0.121380, 0.629492, 0.531973},
    {0.122312, 0.633153, 0.530398},
    {0.123444, 0.636809, 0.528763},
    {0.124780, 0.640461, 0.527068},
    {0.126326, 0.644107, 0.525311},
    {0.128087, 0.647749, 0.523491},
    {0.130067, 0.651384, 0.521608},
    {0.132268, 0.655014, 0.519661},
    {0.134692, 0.658636, 0.517649},
    {0.137339, 0.662252, 0.515571},
    {0.140210, 0.665859, 0.513427},
    {0.143303, 0.669459, 0.511215},
    {0.146616, 0.673050, 0.508936},
    {0.150148, 0.676631, 0.506589},
    {0.153894, 0.680203, 0.504172},
    {0.157851, 0.683765, 0.501686},
    {0.162016, 0.687316, 0.499129},
    {0.166383, 0.690856, 0.496502},
    {0.170948, 0.694384, 0.493803},
    {0.175707, 0.697900, 0.491033},
    {0.180653, 0.701402, 0.488189},
    {0.185783, 0.704891, 0.485273},
    {0.191090, 0.708366, 0.482284},
    {0.196571, 0.711827, 0.479221},
    {0.202219, 0.715272, 0.476084},
    {0.208030, 0.718701, 0.472873},
    {0.214000, 0.722114, 0.469588},
    {0.220124, 0.725509, 0.466226},
    {0.226397, 0.728888, 0.462789},
    {0.232815, 0.732247, 0.459277},
    {0.239374, 0.735588, 0.455688},
    {0.246070, 0.738910, 0.452024},
    {0.252899, 0.742211, 0.448284},
    {0.259857, 0.745492, 0.444467},
    {0.266941, 0.748751, 0.440573},
    {0.274149, 0.751988, 0.436601},
    {0.281477, 0.755203, 0.432552},
    {0.288921, 0.758394, 0.428426},
    {0.296479, 0.761561, 0.424223},
    {0.304148, 0.764704, 0.419943},
    {0.311925, 0.767822, 0.415586},
    {0.319809, 0.770914, 0.411152},
    {0.327796, 0.773980, 0.406640},
    {0.335885, 0.777018, 0.402049},
    {0.344074, 0.780029, 0.397381},
    {0.352360, 0.783011, 0.392636},
    {0.360741, 0.785964, 0.387814},
    {0.369214, 0.788888, 0.382914},
    {0.377779, 0.791781, 0.377939},
    {0.386433, 0.794644, 0.372886},
    {0.395174, 0.797475, 0.367757},
    {0.404001, 0.800275, 0.362552},
    {0.412913, 0.803041, 0.357269},
    {0.421908, 0.805774, 0.351910},
    {0.430983, 0.808473, 0.346476},
    {0.440137, 0.811138, 0.340967},
    {0.449368, 0.813768, 0.335384},
    {0.458674, 0.816363, 0.329727},
    {0.468053, 0.818921, 0.323998},
    {0.477504, 0.821444, 0.318195},
    {0.487026, 0.823929, 0.312321},
    {0.496615, 0.826376, 0.306377},
    {0.506271, 0.828786, 0.300362},
    {0.515992, 0.831158, 0.294279},
    {0.525776, 0.833491, 0.288127},
    {0.535621, 0.835785, 0.281908},
    {0.545524, 0.838039, 0.275626},
    {0.555484, 0.840254, 0.269281},
    {0.565498, 0.842430, 0.262877},
    {0.575563, 0.844566, 0.256415},
    {0.585678, 0.846661, 0.249897},
    {0.595839, 0.848717, 0.243329},
    {0.606045, 0.850733, 0.236712},
    {0.616293, 0.852709, 0.230052},
    {0.626579, 0.854645, 0.223353},
    {0.636902, 0.856542, 0.216620},
    {0.647257, 0.858400, 0.209861},
    {0.657642, 0.860219, 0.203082},
    {0.668054, 0.861999, 0.196293},
    {0.678489, 0.863742, 0.189503},
    {0.688944, 0.865448, 0.182725},
    {0.699415, 0.867117, 0.175971},
    {0.709898, 0.868751, 0.169257},
    {0.720391, 0.870350, 0.162603},
    {0.730889, 0.871916, 0.156029},
    {0.741388, 0.873449, 0.149561},
    {0.751884, 0.874951, 0.143228},
    {0.762373, 0.876424, 0.137064},
    {0.772852, 0.877868, 0.131109},
    {0.783315, 0.879285, 0.125405},
    {0.793760, 0.880678, 0.120005},
    {0.804182, 0.882046, 0.114965},
    {0.814576, 0.883393, 0.110347},
    {0.824940, 0.884720, 0.106217},
    {0.835270, 0.886029, 0.102646},
    {0.845561, 0.887322, 0.099702},
    {0.855810, 0.888601, 0.097452},
    {0.866013, 0.889868, 0.095953},
    {0.876168, 0.891125, 0.095250},
    {0.886271, 0.892374, 0.095374},
    {0.896320, 0.893616, 0.096335},
    {0.906311, 0.894855, 0.098125},
    {0.916242, 0.896091, 0.100717},
    {0.926106, 0.897330, 0.104071},
    {0.935904, 0.898570, 0.108131},
    {0.945636, 0.899815, 0.112838},
    {0.955300, 0.901065, 0.118128},
    {0.964894, 0.902323, 0.123941},
    {0.974417, 0.903590, 0.130215},
    {0.983868, 0.904867, 0.136897},
    {0.993248, 0.906157, 0.143936},
};

/* matplotlib lib/matplotlib/_cm.py, _RdYlBu_data: ColorBrewer RdYlBu, 11
 * classes (165,0,38 ... 49,54,149) divided by 255, as printed there. */
static const double rdylbu_data[11][3] = {
    {0.6470588235294118, 0.0, 0.14901960784313725},
    {0.84313725490196079, 0.18823529411764706, 0.15294117647058825},
    {0.95686274509803926, 0.42745098039215684, 0.2627450980392157},
    {0.99215686274509807, 0.68235294117647061, 0.38039215686274508},
    {0.99607843137254903, 0.8784313725490196, 0.56470588235294117},
    {1.0, 1.0, 0.74901960784313726},
    {0.8784313725490196, 0.95294117647058818, 0.97254901960784312},
    {0.6705882352941176, 0.85098039215686272, 0.9137254901960784},
    {0.45490196078431372, 0.67843137254901964, 0.81960784313725488},
    {0.27058823529411763, 0.45882352941176469, 0.70588235294117652},
    {0.19215686274509805, 0.21176470588235294, 0.58431372549019611},
};

/* matplotlib lib/matplotlib/_cm.py, _coolwarm_data: Moreland's
 * CoolWarmFloat33; control point i sits at x = i / 32 (0.0, 0.03125, ...). */
static const double coolwarm_data[33][3] = {
    {0.2298057, 0.298717966, 0.753683153},
    {0.26623388, 0.353094838, 0.801466763},
    {0.30386891, 0.406535296, 0.84495867},
    {0.342804478, 0.458757618, 0.883725899},
    {0.38301334, 0.50941904, 0.917387822},
    {0.424369608, 0.558148092, 0.945619588},
    {0.46666708, 0.604562568, 0.968154911},
    {0.509635204, 0.648280772, 0.98478814},
    {0.552953156, 0.688929332, 0.995375608},
    {0.596262162, 0.726149107, 0.999836203},
    {0.639176211, 0.759599947, 0.998151185},
    {0.681291281, 0.788964712, 0.990363227},
    {0.722193294, 0.813952739, 0.976574709},
    {0.761464949, 0.834302879, 0.956945269},
    {0.798691636, 0.849786142, 0.931688648},
    {0.833466556, 0.860207984, 0.901068838},
    {0.865395197, 0.86541021, 0.865395561},
    {0.897787179, 0.848937047, 0.820880546},
    {0.924127593, 0.827384882, 0.774508472},
    {0.944468518, 0.800927443, 0.726736146},
    {0.958852946, 0.769767752, 0.678007945},
    {0.96732803, 0.734132809, 0.628751763},
    {0.969954137, 0.694266682, 0.579375448},
    {0.966811177, 0.650421156, 0.530263762},
    {0.958003065, 0.602842431, 0.481775914},
    {0.943660866, 0.551750968, 0.434243684},
    {0.923944917, 0.49730856, 0.387970225},
    {0.89904617, 0.439559467, 0.343229596},
    {0.869186849, 0.378313092, 0.300267182},
    {0.834620542, 0.312874446, 0.259301199},
    {0.795631745, 0.24128379, 0.220525627},
    {0.752534934, 0.157246067, 0.184115123},
    {0.705673158, 0.01555616, 0.150232812},
};

/* Segment data of one channel: rows (x, y0, y1) as in matplotlib. */
enum { SEG_MAX = 40 };
typedef struct seg {
    int n;
    double x[SEG_MAX], y0[SEG_MAX], y1[SEG_MAX];
} seg;

/* numpy.linspace(0, 1, n)[i]: arange(n) * (1 / (n - 1)) + 0, with the last
 * element set to exactly 1 (numpy/core/function_base.py). */
static double linspace01(int i, int n) {
    if (i == n - 1) return 1.0;
    volatile double p = (double)i * (1.0 / (double)(n - 1));
    return p + 0.0;
}

/* matplotlib colors._create_lookup_table(N, data, gamma=1) for N = 256:
 * x scaled by N - 1, sample points (N - 1) * linspace(0, 1, N), searchsorted
 * (left) for the segment, linear interpolation from y1 of the left point to
 * y0 of the right one, ends pinned to y1[0] and y0[-1], then clipped. */
static void lookup_table(const seg *s, double out[AL_CMAP_N]) {
    const int N = AL_CMAP_N;
    double x[SEG_MAX];
    for (int k = 0; k < s->n; k++) x[k] = s->x[k] * (double)(N - 1);
    out[0] = s->y1[0];
    out[N - 1] = s->y0[s->n - 1];
    for (int i = 1; i < N - 1; i++) {
        volatile double xi = (double)(N - 1) * linspace01(i, N);
        int ind = 0;
        while (ind < s->n && x[ind] < xi) ind++;  /* numpy.searchsorted(x, xi, 'left') */
        if (ind == 0) ind = 1;                    /* not reached for valid data (x[0] = 0 < xi) */
        if (ind >= s->n) ind = s->n - 1;
        double distance = (xi - x[ind - 1]) / (x[ind] - x[ind - 1]);
        volatile double prod = distance * (s->y0[ind] - s->y1[ind - 1]);  /* kept apart: no FMA */
        out[i] = prod + s->y1[ind - 1];
    }
    for (int i = 0; i < N; i++) out[i] = out[i] < 0.0 ? 0.0 : out[i] > 1.0 ? 1.0 : out[i];
}

/* LinearSegmentedColormap.reversed(): [(1 - x, y1, y0) for x, y0, y1 in reversed(data)]. */
static void seg_reverse(const seg *s, seg *r) {
    r->n = s->n;
    for (int k = 0; k < s->n; k++) {
        int j = s->n - 1 - k;
        r->x[k] = 1.0 - s->x[j];
        r->y0[k] = s->y1[j];
        r->y1[k] = s->y0[j];
    }
}

/* Channel c of a list of colours placed at given positions, y0 = y1. */
static void seg_from_colours(const double (*col)[3], int n, const double *pos, int c, seg *s) {
    s->n = n;
    for (int k = 0; k < n; k++) {
        s->x[k] = pos[k];
        s->y0[k] = s->y1[k] = col[k][c];
    }
}

/* Fills a map's float table from three segment lists (optionally reversed)
 * and derives its bytes: numpy's (lut * 255).astype(uint8), a truncation. */
static void fill_segmented(al_cmap *m, const char *name, const double (*col)[3], int n,
                           const double *pos, int reverse) {
    m->name = name;
    m->n = AL_CMAP_N;
    for (int c = 0; c < 3; c++) {
        seg s, r;
        double ch[AL_CMAP_N];
        seg_from_colours(col, n, pos, c, &s);
        if (reverse) seg_reverse(&s, &r);
        lookup_table(reverse ? &r : &s, ch);
        for (int i = 0; i < AL_CMAP_N; i++) m->lut[i][c] = ch[i];
    }
}

/* A listed map (viridis): the table is the data, reversed = read backwards
 * (ListedColormap.reversed() reverses the colour list). */
static void fill_listed(al_cmap *m, const char *name, const double (*col)[3], int reverse) {
    m->name = name;
    m->n = AL_CMAP_N;
    for (int i = 0; i < AL_CMAP_N; i++)
        for (int c = 0; c < 3; c++) m->lut[i][c] = col[reverse ? AL_CMAP_N - 1 - i : i][c];
}

/* Bytes from the float table exactly as numpy converts: float64 * 255, then
 * a C cast to uint8 (truncation toward zero; values are in [0, 255]). */
static void fill_bytes(al_cmap *m) {
    for (int i = 0; i < AL_CMAP_N; i++)
        for (int c = 0; c < 3; c++) {
            volatile double v = m->lut[i][c] * 255.0;
            m->lut8[i][c] = (uint8_t)v;
        }
}

enum { CM_VIRIDIS, CM_VIRIDIS_R, CM_RDYLBU, CM_RDYLBU_R, CM_COOLWARM, CM_COOLWARM_R, CM_COUNT };
static al_cmap maps[CM_COUNT];
static pthread_once_t maps_once = PTHREAD_ONCE_INIT;

/* Builds every table once; pthread_once makes first use from several
 * threads safe, and the tables are read-only afterwards. */
static void maps_init(void) {
    double pos11[11], pos33[33];
    for (int k = 0; k < 11; k++) pos11[k] = linspace01(k, 11);  /* from_list: linspace(0, 1, 11) */
    for (int k = 0; k < 33; k++) pos33[k] = (double)k / 32.0;   /* 0.0, 0.03125, ... 1.0: exact */
    fill_listed(&maps[CM_VIRIDIS], "viridis", viridis_data, 0);
    fill_listed(&maps[CM_VIRIDIS_R], "viridis_r", viridis_data, 1);
    fill_segmented(&maps[CM_RDYLBU], "RdYlBu", rdylbu_data, 11, pos11, 0);
    fill_segmented(&maps[CM_RDYLBU_R], "RdYlBu_r", rdylbu_data, 11, pos11, 1);
    fill_segmented(&maps[CM_COOLWARM], "coolwarm", coolwarm_data, 33, pos33, 0);
    fill_segmented(&maps[CM_COOLWARM_R], "coolwarm_r", coolwarm_data, 33, pos33, 1);
    for (int i = 0; i < CM_COUNT; i++) fill_bytes(&maps[i]);
}

const al_cmap *al_cmap_get(const char *name) {
    if (!name) return NULL;
    pthread_once(&maps_once, maps_init);
    for (int i = 0; i < CM_COUNT; i++)
        if (strcmp(maps[i].name, name) == 0) return &maps[i];
    return NULL;
}

const char *al_cmap_names(void) { return "viridis, viridis_r, RdYlBu, RdYlBu_r, coolwarm, coolwarm_r"; }

int al_cmap_rgb(const al_cmap *cmap, double t, uint8_t rgb[3]) {
    if (isnan(t)) return 1;
    const int n = cmap->n;
    double x = t * (double)n;  /* Colormap.__call__: xa *= N; xa[xa == N] = N - 1 */
    int i;
    if (x < 0.0) i = 0;              /* under: the first colour */
    else if (x >= (double)n) i = n - 1;  /* 1.0 itself and over: the last colour */
    else i = (int)x;                 /* astype(int): truncation */
    memcpy(rgb, cmap->lut8[i], 3);
    return 0;
}

/* ---- norms ---- */

/* A limit the caller left for the data to decide. */
static int limit_unset(double v) { return isnan(v); }

int al_norm_check(const al_norm *n, al_err *err) {
    if (!isfinite(n->vmin) || !isfinite(n->vmax))
        return al_errf(err, "colour limits must be finite numbers (got %g .. %g)", n->vmin, n->vmax);
    if (!(n->vmin < n->vmax))
        return al_errf(err, "colour limits need vmin < vmax (got %g .. %g)", n->vmin, n->vmax);
    if (n->kind == AL_NORM_LOG && n->vmin <= 0)
        return al_errf(err, "a logarithmic colour scale needs positive limits (got %g .. %g)", n->vmin, n->vmax);
    if (n->kind == AL_NORM_SYMMETRIC && n->vmin != -n->vmax)
        return al_errf(err, "a symmetric colour scale needs vmin = -vmax (got %g .. %g)", n->vmin, n->vmax);
    if (n->kind != AL_NORM_LINEAR && n->kind != AL_NORM_LOG && n->kind != AL_NORM_SYMMETRIC)
        return al_errf(err, "unknown colour scale kind %d", (int)n->kind);
    return 0;
}

int al_norm_autoscale(al_norm *n, const float *v, size_t count, al_err *err) {
    int auto_both = n->vmin == 0 && n->vmax == 0;
    int want_lo = auto_both || limit_unset(n->vmin), want_hi = auto_both || limit_unset(n->vmax);
    if (n->kind == AL_NORM_SYMMETRIC) {
        if (!(n->vmax > 0)) {  /* NaN, 0 or negative: from the data */
            double m = 0;
            for (size_t i = 0; i < count; i++)
                if (isfinite(v[i]) && fabs(v[i]) > m) m = fabs(v[i]);
            n->vmax = m > 0 ? m : 1.0;
        }
        n->vmin = -n->vmax;
        return al_norm_check(n, err);
    }
    if (want_lo || want_hi) {
        double lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < count; i++) {
            double x = v[i];
            if (!isfinite(x) || (n->kind == AL_NORM_LOG && x <= 0)) continue;
            if (x < lo) lo = x;
            if (x > hi) hi = x;
        }
        if (lo > hi) {  /* nothing usable: a harmless default range */
            lo = n->kind == AL_NORM_LOG ? 1e-6 : 0.0;
            hi = 1.0;
        }
        if (want_lo) n->vmin = lo;
        if (want_hi) n->vmax = hi;
    }
    if (n->vmin == n->vmax) {  /* constant data: widen around it */
        if (n->kind == AL_NORM_LOG) {
            n->vmin /= 10;
            n->vmax *= 10;
        } else {
            double d = n->vmin == 0 ? 1.0 : 0.1 * fabs(n->vmin);
            n->vmin -= d;
            n->vmax += d;
        }
    }
    return al_norm_check(n, err);
}

double al_norm_apply(const al_norm *n, double v) {
    if (isnan(v)) return NAN;
    if (n->kind == AL_NORM_LOG) {
        if (v <= 0) return NAN;
        double l0 = log10(n->vmin), l1 = log10(n->vmax);
        return (log10(v) - l0) / (l1 - l0);
    }
    return (v - n->vmin) / (n->vmax - n->vmin);
}

int al_norm_rgb(const al_cmap *cmap, const al_norm *norm, double v, const uint8_t bad[3], uint8_t rgb[3]) {
    if (al_cmap_rgb(cmap, al_norm_apply(norm, v), rgb)) {
        memcpy(rgb, bad, 3);
        return 1;
    }
    return 0;
}
