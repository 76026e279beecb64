! fzclient.f90 - the Fortran module of libfzclient, the client of the fzd
! compression daemon (docs/fortran.md).
!
! The connection calls of fzclient.h are bound directly (they take only
! pointers, strings and sizes).  Jobs go through small C shims
! (fzclient_f.c) instead of a Fortran mirror of fz_job and fz_result: those
! structs hold pointers and char arrays and grow at their ends, and a mirror
! that fell behind would corrupt memory silently.  Shapes are given in
! Fortran order (fastest-varying first, as shape() returns them) and
! reversed here into fzd's slowest-first order, so an array a(nx, ny) is
! the C array a[ny][nx] it is in memory.  Every function returns an integer
! status: 0, or a negative fz_errno code (fz_error.h) whose text
! fz_strerror_f() gives.
!
! Data written with fzd stays readable with no daemon: a handle that is
! c_null_ptr (connecting failed) or whose daemon went away has its jobs run
! in process by the engine the library carries, making the same archives.
! fz_require_daemon_f(.true.) turns those cases into errors instead.
module fzclient
  use, intrinsic :: iso_c_binding
  implicit none
  private

  public :: fz_client_connect_f, fz_client_close_f, fz_client_errmsg_f, fz_strerror_f
  public :: fz_compress_bound_f, fz_compress_f32, fz_compress_f64
  public :: fz_decompress_f32, fz_decompress_f64
  public :: fz_require_daemon_f, fz_in_process_f

  integer, parameter :: max_dims = 4

  interface
    integer(c_int) function fz_client_connect(out, address, opts, errmsg, errmsg_len) &
        bind(C, name='fz_client_connect')
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), intent(out) :: out
      character(kind=c_char), intent(in) :: address(*)
      type(c_ptr), value :: opts
      character(kind=c_char), intent(out) :: errmsg(*)
      integer(c_size_t), value :: errmsg_len
    end function

    ! The same with address NULL (the default address, $FZD_SOCKET).
    integer(c_int) function fz_client_connect_default(out, address, opts, errmsg, errmsg_len) &
        bind(C, name='fz_client_connect')
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), intent(out) :: out
      type(c_ptr), value :: address
      type(c_ptr), value :: opts
      character(kind=c_char), intent(out) :: errmsg(*)
      integer(c_size_t), value :: errmsg_len
    end function

    subroutine fz_client_close(c) bind(C, name='fz_client_close')
      import :: c_ptr
      type(c_ptr), value :: c
    end subroutine

    type(c_ptr) function fzf_errmsg(c) bind(C, name='fzf_errmsg')
      import :: c_ptr
      type(c_ptr), value :: c
    end function

    subroutine fzf_require_daemon(required) bind(C, name='fzf_require_daemon')
      import :: c_int
      integer(c_int), value :: required
    end subroutine

    integer(c_int) function fzf_in_process() bind(C, name='fzf_in_process')
      import :: c_int
    end function

    type(c_ptr) function fz_strerror(code) bind(C, name='fz_strerror')
      import :: c_ptr, c_int
      integer(c_int), value :: code
    end function

    subroutine fzf_copy_string(s, buf, len) bind(C, name='fzf_copy_string')
      import :: c_ptr, c_char, c_size_t
      type(c_ptr), value :: s
      character(kind=c_char), intent(out) :: buf(*)
      integer(c_size_t), value :: len
    end subroutine

    integer(c_int) function fzf_compress(c, dtype, ndims, shape, pipeline, eb, mode, in, &
        in_len, out, out_cap, out_len, eb_abs) bind(C, name='fzf_compress')
      import :: c_int, c_ptr, c_char, c_int64_t, c_double, c_size_t
      type(c_ptr), value :: c
      character(kind=c_char), intent(in) :: dtype(*), pipeline(*), mode(*)
      integer(c_int), value :: ndims
      integer(c_int64_t), intent(in) :: shape(*)
      real(c_double), value :: eb
      type(c_ptr), value :: in, out
      integer(c_size_t), value :: in_len, out_cap
      integer(c_size_t), intent(out) :: out_len
      real(c_double), intent(out) :: eb_abs
    end function

    integer(c_int) function fzf_decompress(c, arc, arc_len, out, out_cap, out_len) &
        bind(C, name='fzf_decompress')
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: c, arc, out
      integer(c_size_t), value :: arc_len, out_cap
      integer(c_size_t), intent(out) :: out_len
    end function

    integer(c_int) function fzf_compress_bound(dtype, ndims, shape, pipeline, eb, mode, bound) &
        bind(C, name='fzf_compress_bound')
      import :: c_int, c_char, c_int64_t, c_double, c_size_t
      character(kind=c_char), intent(in) :: dtype(*), pipeline(*), mode(*)
      integer(c_int), value :: ndims
      integer(c_int64_t), intent(in) :: shape(*)
      real(c_double), value :: eb
      integer(c_size_t), intent(out) :: bound
    end function
  end interface

contains

  ! Connects to the daemon at address ("unix:PATH", "tcp:HOST:PORT", a path;
  ! blank: the default address of docs/client.md, $FZD_SOCKET or fzd's usual
  ! sockets).  errmsg receives the reason of a failure, and client is
  ! c_null_ptr then: the calls that take it run in process.
  integer function fz_client_connect_f(client, address, errmsg) result(st)
    type(c_ptr), intent(out) :: client
    character(len=*), intent(in) :: address
    character(len=*), intent(out) :: errmsg
    character(kind=c_char) :: buf(256)
    integer :: i, n
    if (len_trim(address) == 0) then
      st = fz_client_connect_default(client, c_null_ptr, c_null_ptr, buf, int(size(buf), c_size_t))
    else
      st = fz_client_connect(client, trim(address)//c_null_char, c_null_ptr, buf, &
                             int(size(buf), c_size_t))
    end if
    errmsg = ''
    if (st < 0) then
      n = 0
      do i = 1, size(buf)
        if (buf(i) == c_null_char) exit
        n = i
      end do
      do i = 1, min(n, len(errmsg))
        errmsg(i:i) = buf(i)
      end do
    end if
  end function

  subroutine fz_client_close_f(client)
    type(c_ptr), intent(inout) :: client
    call fz_client_close(client)
    client = c_null_ptr
  end subroutine

  ! The last failure of this thread's calls, blank-padded into msg: the
  ! daemon's own message when it refused a job, the engine's when the job
  ! ran in process (client may be c_null_ptr).
  subroutine fz_client_errmsg_f(client, msg)
    type(c_ptr), intent(in) :: client
    character(len=*), intent(out) :: msg
    call fzf_copy_string(fzf_errmsg(client), msg, int(len(msg), c_size_t))
  end subroutine

  ! required = .true.: compress and decompress never run in process; with
  ! no connection or a daemon that went away they fail (FZ_ECONNREFUSED,
  ! FZ_ECONNRESET...).  For the whole process; the default is .false.
  subroutine fz_require_daemon_f(required)
    logical, intent(in) :: required
    call fzf_require_daemon(merge(1_c_int, 0_c_int, required))
  end subroutine

  ! .true. when this thread's last compress or decompress ran in process.
  logical function fz_in_process_f()
    fz_in_process_f = fzf_in_process() /= 0
  end function

  subroutine fz_strerror_f(code, msg)
    integer, intent(in) :: code
    character(len=*), intent(out) :: msg
    call fzf_copy_string(fz_strerror(int(code, c_int)), msg, int(len(msg), c_size_t))
  end subroutine

  ! Fortran-order extents to fzd's slowest-first shape.
  subroutine c_shape(fshape, cs, nd)
    integer, intent(in) :: fshape(:)
    integer(c_int64_t), intent(out) :: cs(max_dims)
    integer(c_int), intent(out) :: nd
    integer :: i
    nd = int(size(fshape), c_int)
    cs = 0
    do i = 1, min(size(fshape), max_dims)
      cs(i) = int(fshape(size(fshape) - i + 1), c_int64_t)
    end do
  end subroutine

  ! An upper bound on the archive's size for an array of dtype ('f32',
  ! 'f64') and Fortran shape fshape, compressed with pipeline (blank:
  ! balanced), bound eb and mode (blank: rel).
  integer function fz_compress_bound_f(dtype, fshape, pipeline, eb, mode, bound) result(st)
    character(len=*), intent(in) :: dtype, pipeline, mode
    integer, intent(in) :: fshape(:)
    real(c_double), intent(in) :: eb
    integer(c_size_t), intent(out) :: bound
    integer(c_int64_t) :: cs(max_dims)
    integer(c_int) :: nd
    call c_shape(fshape, cs, nd)
    st = fzf_compress_bound(trim(dtype)//c_null_char, nd, cs, trim(pipeline)//c_null_char, &
                            eb, trim(mode)//c_null_char, bound)
  end function

  ! Compresses the real(4) array a (any rank up to 4, contiguous: the whole
  ! array, its extents in fshape, e.g. shape(a)) into archive, at most
  ! size(archive) bytes (fz_compress_bound_f() is always enough);
  ! archive_len receives the archive's bytes, eb_abs the absolute bound that
  ! was enforced.
  integer function fz_compress_f32(client, a, fshape, pipeline, eb, mode, archive, &
                                   archive_len, eb_abs) result(st)
    type(c_ptr), intent(in) :: client
    real(c_float), intent(in), target :: a(*)
    integer, intent(in) :: fshape(:)
    character(len=*), intent(in) :: pipeline, mode
    real(c_double), intent(in) :: eb
    integer(c_int8_t), intent(inout), target, contiguous :: archive(:)
    integer(c_size_t), intent(out) :: archive_len
    real(c_double), intent(out) :: eb_abs
    integer(c_int64_t) :: cs(max_dims)
    integer(c_int) :: nd
    call c_shape(fshape, cs, nd)
    st = fzf_compress(client, 'f32'//c_null_char, nd, cs, trim(pipeline)//c_null_char, eb, &
                      trim(mode)//c_null_char, c_loc(a(1)), int(product(int(fshape, c_size_t)), c_size_t) * 4_c_size_t, &
                      c_loc(archive), int(size(archive), c_size_t), archive_len, eb_abs)
  end function

  integer function fz_compress_f64(client, a, fshape, pipeline, eb, mode, archive, &
                                   archive_len, eb_abs) result(st)
    type(c_ptr), intent(in) :: client
    real(c_double), intent(in), target :: a(*)
    integer, intent(in) :: fshape(:)
    character(len=*), intent(in) :: pipeline, mode
    real(c_double), intent(in) :: eb
    integer(c_int8_t), intent(inout), target, contiguous :: archive(:)
    integer(c_size_t), intent(out) :: archive_len
    real(c_double), intent(out) :: eb_abs
    integer(c_int64_t) :: cs(max_dims)
    integer(c_int) :: nd
    call c_shape(fshape, cs, nd)
    st = fzf_compress(client, 'f64'//c_null_char, nd, cs, trim(pipeline)//c_null_char, eb, &
                      trim(mode)//c_null_char, c_loc(a(1)), int(product(int(fshape, c_size_t)), c_size_t) * 8_c_size_t, &
                      c_loc(archive), int(size(archive), c_size_t), archive_len, eb_abs)
  end function

  ! Decompresses archive(1:archive_len) into a, which has n elements
  ! (size(a)); FZ_ESIZE (-4020) when the archive holds another number.
  integer function fz_decompress_f32(client, archive, archive_len, a, n) result(st)
    type(c_ptr), intent(in) :: client
    integer(c_int8_t), intent(in), target, contiguous :: archive(:)
    integer(c_size_t), intent(in) :: archive_len
    real(c_float), intent(inout), target :: a(*)
    integer, intent(in) :: n
    integer(c_size_t) :: got
    st = fzf_decompress(client, c_loc(archive), archive_len, c_loc(a(1)), &
                        int(n, c_size_t) * 4_c_size_t, got)
  end function

  integer function fz_decompress_f64(client, archive, archive_len, a, n) result(st)
    type(c_ptr), intent(in) :: client
    integer(c_int8_t), intent(in), target, contiguous :: archive(:)
    integer(c_size_t), intent(in) :: archive_len
    real(c_double), intent(inout), target :: a(*)
    integer, intent(in) :: n
    integer(c_size_t) :: got
    st = fzf_decompress(client, c_loc(archive), archive_len, c_loc(a(1)), &
                        int(n, c_size_t) * 8_c_size_t, got)
  end function
end module fzclient
